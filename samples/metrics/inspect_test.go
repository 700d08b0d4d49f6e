package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// -inspect-addr serves the live inspector page of the running pipeline,
// read-only.
func TestInspectAddr(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out, _, wait := started(t, ctx, "-items", "300", "-rate", "0", "-hold", "-log-level", "ERROR", "-inspect-addr", "127.0.0.1:0")
	addr := out.waitFor(t, ctx, `metrics: inspector on (http://\S+/)`)[1]
	out.waitFor(t, ctx, `metrics: holding`)
	resp, err := client.Get(addr + "api/snapshot")
	require.NoError(t, err)
	defer resp.Body.Close()
	var snap struct {
		Pipeline string
		Nodes    []struct {
			Name string
			In   int64
		}
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&snap))
	assert.Equal(t, "orders", snap.Pipeline)
	require.NotEmpty(t, snap.Nodes)
	assert.Equal(t, "read", snap.Nodes[0].Name)
	assert.Equal(t, int64(300), snap.Nodes[1].In, "the run's items, after it ended")
	req, err := http.NewRequest(http.MethodPost, addr+"api/drain", nil)
	require.NoError(t, err)
	req.Header.Set("X-Sluice-Inspect", "1")
	dr, err := client.Do(req)
	require.NoError(t, err)
	dr.Body.Close()
	assert.Equal(t, http.StatusForbidden, dr.StatusCode, "the sample's page is read-only")
	cancel()
	require.NoError(t, wait(), "interrupting a held run is its normal end")
}
