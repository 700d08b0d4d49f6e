package deadletter_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

func TestReadFileTornAtEveryOffsetOfTheLastLine(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(writeFile(t, 3))
	require.NoError(t, err)
	last := bytes.LastIndexByte(data[:len(data)-1], '\n') + 1
	dir := t.TempDir()

	for cut := last; cut <= len(data); cut++ {
		path := filepath.Join(dir, "torn.jsonl")
		require.NoError(t, os.WriteFile(path, data[:cut], 0o600))
		envs, errs := readBack(t, path)

		switch {
		case cut == last:
			assert.Equal(t, []int{0, 1}, itemIDs(t, envs), "cut %d: the last line is gone", cut)
			assert.Empty(t, errs, "cut %d", cut)
		case cut >= len(data)-1:
			// Only the newline is missing, or nothing: the envelope is whole.
			assert.Equal(t, []int{0, 1, 2}, itemIDs(t, envs), "cut %d", cut)
			assert.Empty(t, errs, "cut %d", cut)
		default:
			assert.Equal(t, []int{0, 1}, itemIDs(t, envs), "cut %d: everything before the tear", cut)
			require.Len(t, errs, 1, "cut %d", cut)
			assert.ErrorIs(t, errs[0], deadletter.ErrTornLine, "cut %d", cut)
			assert.NotErrorIs(t, errs[0], deadletter.ErrCorruptLine, "cut %d", cut)
			var le *deadletter.LineError
			require.ErrorAs(t, errs[0], &le)
			assert.Equal(t, path, le.Path)
			assert.Equal(t, 3, le.Line)
			assert.Equal(t, int64(last), le.Offset)
		}
	}
}

func TestReadFileReportsCorruptLinesAndGoesOn(t *testing.T) {
	t.Parallel()
	good, err := os.ReadFile(writeFile(t, 3))
	require.NoError(t, err)
	lines := strings.SplitAfter(string(good), "\n")
	content := lines[0] +
		"not json\n" +
		"null\n" +
		"[1,2]\n" +
		`{"attempts":"four"}` + "\n" +
		`{"history":[{"layer":"teleport"}]}` + "\n" +
		lines[1] +
		"\n   \n" + // blank lines are skipped silently
		lines[2]
	path := filepath.Join(t.TempDir(), "corrupt.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))

	var lineNumbers []int
	var envs []deadletter.Envelope
	var errLines []int
	for r, err := range deadletter.ReadRecords(path) {
		if err != nil {
			assert.ErrorIs(t, err, deadletter.ErrCorruptLine)
			var le *deadletter.LineError
			require.ErrorAs(t, err, &le)
			errLines = append(errLines, le.Line)
			continue
		}
		envs = append(envs, r.Envelope)
		lineNumbers = append(lineNumbers, r.Line)
		assert.True(t, strings.HasPrefix(content[r.Offset:], string(r.Raw)+"\n"), "line %d: Raw is the line at Offset", r.Line)
		assert.Equal(t, path, r.Path)
	}
	assert.Equal(t, []int{0, 1, 2}, itemIDs(t, envs))
	assert.Equal(t, []int{1, 7, 10}, lineNumbers)
	assert.Equal(t, []int{2, 3, 4, 5, 6}, errLines)
}

func TestLineErrorMessages(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	require.NoError(t, os.WriteFile(path, []byte("{\"a\":1}\nnope\n{\"item\":"), 0o600))
	var msgs []string
	for _, err := range deadletter.ReadFile(path) {
		if err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	assert.Equal(t, []string{
		"deadletter: " + path + `:1 (byte 0): corrupt line: no "item" and no "item_error": not a dead letter`,
		"deadletter: " + path + ":2 (byte 8): corrupt line: not a JSON object",
		"deadletter: " + path + ":3 (byte 13): torn last line: 8 bytes without a newline at the end of the file",
	}, msgs)
}

// A JSON object without "item" and without "item_error" is no dead letter
// (every envelope written holds one of them): it is a corrupt line, not an
// envelope whose item is null, which a re-drive would send as "null".
func TestReadRefusesALineWithoutAnItem(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	lines := []string{
		`{}`,
		`{"error":"x","origin_node":"n"}`,
		`{"item":null,"error":"a nil item"}`,
		`{"item_error":"json: unsupported type","item_text":"f","error":"x"}`,
		`{"item":{"id":1}}`,
	}
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	var good, bad []int
	for r, err := range deadletter.ReadRecords(path) {
		if err != nil {
			assert.ErrorIs(t, err, deadletter.ErrCorruptLine)
			assert.Contains(t, err.Error(), `no "item"`)
			var le *deadletter.LineError
			require.ErrorAs(t, err, &le)
			bad = append(bad, le.Line)
			continue
		}
		good = append(good, r.Line)
	}
	assert.Equal(t, []int{1, 2}, bad)
	assert.Equal(t, []int{3, 4, 5}, good)
}

func TestReadFileMissing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "missing.jsonl")
	var errs []error
	for _, err := range deadletter.ReadFile(path) {
		errs = append(errs, err)
	}
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0], fs.ErrNotExist)
	assert.Equal(t, "deadletter: open "+path+": no such file or directory", errs[0].Error())
}

func TestReadFileStopsWhenTheLoopBreaks(t *testing.T) {
	t.Parallel()
	path := writeFile(t, 5)
	var n int
	for _, err := range deadletter.ReadFile(path) {
		require.NoError(t, err)
		n++
		if n == 2 {
			break
		}
	}
	assert.Equal(t, 2, n)

	// Every range reads the file anew.
	envs, errs := readBack(t, path)
	assert.Empty(t, errs)
	assert.Len(t, envs, 5)
}
