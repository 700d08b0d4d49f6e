package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluicehq/sluice/samples/internal/inspectcheck"
)

// -inspect-addr serves the pricing pipeline's page while it runs.
func TestInspectAddr(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	served := 0
	cfg := config{brokers: cluster.ListenAddrs(), orders: "orders", results: "results", n: 50, customers: 7,
		partitions: 3, flaky: 10, reportWriter: &out, inspectAddr: "127.0.0.1:0", inspectorReady: func(url string) {
			served++
			inspectcheck.ReadOnlyGraph(t, url, "price-orders", "orders", "price", "results")
		}}
	require.NoError(t, cfg.validate())
	s, err := run(ctx, cfg, false)
	require.NoError(t, err)
	assert.Equal(t, 1, served)
	assert.Contains(t, out.String(), "kafka: inspector on http://127.0.0.1:")
	assert.Equal(t, 50, s.results)
}
