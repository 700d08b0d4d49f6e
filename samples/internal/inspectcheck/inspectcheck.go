// Package inspectcheck checks, in the samples' tests, the inspector page
// that a sample serves with -inspect-addr.
package inspectcheck

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ReadOnlyGraph checks, once the page of the pipeline named name is
// served at url, that it draws the pipeline's nodes, in that order, and
// that it is read-only: a drain asked with the controls' header is
// refused.
func ReadOnlyGraph(t *testing.T, url, name string, nodes ...string) {
	t.Helper()
	resp, err := http.Get(url + "api/graph")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var g struct {
		Pipeline string
		Nodes    []struct{ Name string }
		CanDrain bool
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&g))
	assert.Equal(t, name, g.Pipeline)
	var got []string
	for _, n := range g.Nodes {
		got = append(got, n.Name)
	}
	assert.Equal(t, nodes, got)
	assert.False(t, g.CanDrain, "the sample's page is read-only")
	req, err := http.NewRequest(http.MethodPost, url+"api/drain", nil)
	require.NoError(t, err)
	req.Header.Set("X-Sluice-Inspect", "1")
	dr, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	dr.Body.Close()
	assert.Equal(t, http.StatusForbidden, dr.StatusCode)
}
