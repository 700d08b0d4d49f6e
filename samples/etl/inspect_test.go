package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// -inspect-addr serves the live inspector page while the job runs.
func TestInspectorWhileRunning(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	assert.Equal(t, 0, run(t.Context(), []string{"-help"}, &bytes.Buffer{}, &stderr))
	assert.Contains(t, stderr.String(), "-inspect-addr")

	cfg := testConfig(t)
	cfg.rows = 500
	cfg.inspectAddr = "127.0.0.1:0"
	out := &lockedBuffer{}
	var snap struct {
		Pipeline string
		Running  bool
		Nodes    []struct{ Name string }
	}
	var canDrain bool
	runOnFakeClockWith(t, cfg, out, func() {
		// The job is running and waits on the clock: read the page's data.
		addr := regexp.MustCompile(`inspector on (http://\S+/)`).FindStringSubmatch(out.String())
		require.Len(t, addr, 2, out.String())
		resp, err := http.Get(addr[1] + "api/snapshot")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&snap))
		g, err := http.Get(addr[1] + "api/graph")
		require.NoError(t, err)
		defer g.Body.Close()
		var gv struct{ CanDrain bool }
		require.NoError(t, json.NewDecoder(g.Body).Decode(&gv))
		canDrain = gv.CanDrain
	}, nil)
	assert.Equal(t, "orders-etl", snap.Pipeline)
	assert.True(t, snap.Running)
	var names []string
	for _, n := range snap.Nodes {
		names = append(names, n.Name)
	}
	assert.Contains(t, names, "enrich")
	assert.False(t, canDrain, "the demo's page is read-only")
}
