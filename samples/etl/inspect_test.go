package main

import (
	"bytes"
	"encoding/json"
	"io"
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
	var events *http.Response
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
		events, err = http.Get(addr[1] + "api/events")
		require.NoError(t, err)
	}, nil)
	// The page watching the run gets, at its end, a last snapshot of the
	// run as it ended, before the server goes: not running, every row
	// counted. (The server was closed at once, and the last snapshot the
	// page had said running.)
	defer events.Body.Close()
	stream, err := io.ReadAll(events.Body)
	require.NoError(t, err, "the stream ends cleanly")
	datas := regexp.MustCompile(`(?m)^data: (.*)$`).FindAllStringSubmatch(string(stream), -1)
	require.NotEmpty(t, datas)
	var last struct {
		Running bool
		Nodes   []struct {
			Name string
			In   int64
		}
	}
	require.NoError(t, json.Unmarshal([]byte(datas[len(datas)-1][1]), &last))
	assert.False(t, last.Running, "the last snapshot is of the run that ended")
	for _, n := range last.Nodes {
		if n.Name == "parse" {
			assert.Equal(t, int64(cfg.rows), n.In, "every row counted")
		}
	}
	assert.Equal(t, "orders-etl", snap.Pipeline)
	assert.True(t, snap.Running)
	var names []string
	for _, n := range snap.Nodes {
		names = append(names, n.Name)
	}
	assert.Contains(t, names, "enrich")
	assert.False(t, canDrain, "the demo's page is read-only")
}
