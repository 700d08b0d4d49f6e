package main_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/deadletter"
)

// dlq show prints a UTF-8 body as text for people to read: <, > and & as
// they are, not as json.Marshal's \u003c, \u003e and \u0026 (an XML or
// HTML body, or a query string, would read as escapes).
func TestShowTextBodyNotHTMLEscaped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f, err := deadletter.OpenFile(filepath.Join(dir, "x.jsonl"))
	require.NoError(t, err)
	require.NoError(t, f.Write(t.Context(), deadletter.Envelope{Item: []byte(`<order id="1">a&b</order>`), ErrText: "bad"}))
	require.NoError(t, f.Close())
	code, stdout, stderr := sluice(t, dir, "dlq", "show", "x.jsonl", "1")
	require.Equal(t, 0, code, stderr)
	t.Log(stdout)
	assert.Contains(t, stdout, `<order id=\"1\">a&b</order>`)
	assert.NotContains(t, stdout, `\u00`)
}
