package deadletter_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// FuzzReadFile reads a file of valid lines followed by arbitrary bytes.
// Reading never panics, every error is a *LineError naming a line after
// the valid ones, and every valid line comes back, in order.
func FuzzReadFile(f *testing.F) {
	valid, err := os.ReadFile(writeFile(f, 4))
	require.NoError(f, err)
	lines := bytes.SplitAfter(valid, []byte{'\n'})[:4]

	f.Add(uint8(0), []byte(nil))
	f.Add(uint8(2), []byte(`{"item":{"id":`))
	f.Add(uint8(3), []byte("garbage\n\x00\xff{}\n"))
	f.Add(uint8(4), []byte(`{"history":[{"layer":"RetryKind(-9)","time":"2026-13-01T00:00:00Z"}]}`))
	f.Add(uint8(1), []byte("null\n[]\n\"s\"\n{\"attempts\":1e99}\n\r\n{\"item\":[}"))
	f.Add(uint8(2), lines[3][:len(lines[3])-1])
	f.Fuzz(func(t *testing.T, n uint8, garbage []byte) {
		k := int(n) % (len(lines) + 1)
		content := append(bytes.Join(lines[:k], nil), garbage...)
		path := filepath.Join(t.TempDir(), "fuzz.jsonl")
		require.NoError(t, os.WriteFile(path, content, 0o600))

		var got []deadletter.Record
		for r, err := range deadletter.ReadRecords(path) {
			if err != nil {
				var le *deadletter.LineError
				require.ErrorAs(t, err, &le)
				assert.Greater(t, le.Line, k, "a valid line was reported: %v", err)
				assert.True(t, errors.Is(err, deadletter.ErrTornLine) || errors.Is(err, deadletter.ErrCorruptLine), err)
				continue
			}
			got = append(got, r)
		}
		require.GreaterOrEqual(t, len(got), k)
		for i := range k {
			assert.Equal(t, i+1, got[i].Line)
			assert.Equal(t, bytes.TrimSuffix(lines[i], []byte{'\n'}), got[i].Raw)
			var o order
			require.NoError(t, jsonUnmarshal(got[i].Item, &o))
			assert.Equal(t, i, o.ID)
		}
	})
}
