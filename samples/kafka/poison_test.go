package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestUndecodableRecordIsDeadLetteredAndPassed puts a record the pricing
// cannot read (another producer's) in the orders topic before the run. The
// pricing marked the decode error permanent and the pipeline had no
// dead-letter sink, so the run failed on it, its offset was never committed,
// and every later run failed on it again. Now it is dead-lettered, counted
// in the summary, and committed: the next run does not see it.
func TestUndecodableRecordIsDeadLetteredAndPassed(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	defer cluster.Close()
	cfg := config{brokers: cluster.ListenAddrs(), orders: "orders", results: "results", n: 20, customers: 3,
		partitions: 3}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, declare(ctx, cfg))
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.brokers...))
	require.NoError(t, err)
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Key: []byte("c00"), Value: []byte("nope")}).FirstErr())
	cl.Close()

	s, err := run(ctx, cfg, false)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "summary %+v", s)
	require.NoError(t, err, "summary %+v", s)
	assert.Equal(t, 20, s.results)
	assert.Equal(t, 1, s.deadLettered, "the record that does not decode")
	var out bytes.Buffer
	s.print(&out)
	assert.Contains(t, out.String(), "dead-letter     1 orders that do not decode")

	s, err = run(ctx, cfg, false)
	require.NoError(t, err, "second run, summary %+v", s)
	assert.Equal(t, 20, s.results)
	assert.Zero(t, s.deadLettered, "the first run committed the record's offset")
}
