package file_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/connector/file"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// resumeEverywhere runs src from the start, then from each position it
// gave, and checks that each resumed run emits exactly the items after
// it, with the same positions.
func resumeEverywhere[T any](t *testing.T, src source[T]) {
	t.Helper()
	all := runFrom(t, src, nil)
	for i, pos := range all.pos {
		rest := runFrom(t, src, pos)
		assert.Equal(t, len(all.items)-i-1, len(rest.items), "resumed after item %d", i)
		for j := range rest.items {
			assert.Equal(t, all.items[i+1+j], rest.items[j], "resumed after item %d", i)
			assert.Equal(t, all.pos[i+1+j], rest.pos[j], "resumed after item %d", i)
		}
	}
}

func TestResumingAtEveryPositionEmitsExactlyTheRest(t *testing.T) {
	t.Parallel()
	csvContent := "\ufeffid,note\r\n1,\"two\r\nlines\"\r\n\r\n2,x\r\n3,\"a,b\"\r\n4,last"
	jsonContent := "{\"id\":1}\n\n{\"id\":2,\"sku\":\"b\"}\r\n   \n{\"id\":3}"
	for _, zip := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "gzip"}[zip], func(t *testing.T) {
			t.Parallel()
			resumeEverywhere(t, file.Lines(write(t, "in.txt", csvContent, zip)))
			resumeEverywhere(t, file.CSV(write(t, "in.csv", csvContent, zip), file.CSVOptions{Header: true}))
			resumeEverywhere(t, file.CSV(write(t, "in.csv", csvContent, zip), file.CSVOptions{}))
			resumeEverywhere(t, file.JSONL[order](write(t, "in.jsonl", jsonContent, zip)))
		})
	}
}

func TestThePositionAfterTheLastItemResumesToNothing(t *testing.T) {
	t.Parallel()
	for _, content := range []string{"a\nb\n", "a\nb"} {
		src := file.Lines(write(t, "in.txt", content, false))
		all := runFrom(t, src, nil)
		require.Len(t, all.pos, 2)
		rest := runFrom(t, src, all.pos[1])
		assert.Empty(t, rest.items)
		assert.Equal(t, int64(0), src.Size())
	}
}

func TestAPositionThatDoesNotFitTheFileIsAnError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, zip := range []bool{false, true} {
		long := write(t, "long.txt", "first line\nsecond line\nthird\n", zip)
		all := runFrom(t, file.Lines(long), nil)
		require.Len(t, all.pos, 3)

		// The file shrank: the position is past its end.
		short := write(t, "short.txt", "first line\n", zip)
		src := file.Lines(short)
		require.NoError(t, src.Resume(all.pos[1]))
		err := src.Open(ctx)
		require.ErrorIs(t, err, file.ErrPosition)
		assert.Contains(t, err.Error(), short)
		assert.Contains(t, err.Error(), "past the end")
		err = src.Run(ctx, &recorder[string]{})
		assert.ErrorIs(t, err, file.ErrPosition, "Run opens and says the same")

		// The file changed: the position is no longer after a line.
		changed := write(t, "changed.txt", "first line is longer now\nsecond\n", zip)
		src = file.Lines(changed)
		require.NoError(t, src.Resume(all.pos[0]))
		err = src.Open(ctx)
		require.ErrorIs(t, err, file.ErrPosition)
		assert.Contains(t, err.Error(), "not at the end of a line")
	}
}

func TestMalformedPositionBytesAreRefusedByResume(t *testing.T) {
	t.Parallel()
	path := write(t, "in.txt", "a\nb\n", false)
	good := runFrom(t, file.Lines(path), nil).pos[0]
	for _, pos := range [][]byte{
		{},
		[]byte("garbage"),
		good[:len(good)-1],
		append(append([]byte(nil), good...), 0),
		{1, 1, 5, 0}, // five lines in one byte
	} {
		src := file.Lines(path)
		err := src.Resume(pos)
		require.ErrorIs(t, err, file.ErrPosition, "%v", pos)
		assert.Contains(t, err.Error(), path)
	}
}

func TestATruncatedGzipFileFailsTheRunAfterItsWholeLines(t *testing.T) {
	t.Parallel()
	path := write(t, "in.txt.gz", strings.Repeat("a line of text\n", 10000), true)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data[:len(data)-20], 0o600))
	r := &recorder[string]{}
	err = file.Lines(path).Run(context.Background(), r)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
	assert.Greater(t, len(r.items), 9000)
	for _, line := range r.items {
		require.Equal(t, "a line of text", line, "only whole lines are emitted")
	}
}

func TestSeveralGzipStreamsInARowAreReadAsOne(t *testing.T) {
	t.Parallel()
	first := write(t, "a.gz", "a\nb\n", true)
	second := write(t, "b.gz", "c\n", true)
	a, err := os.ReadFile(first)
	require.NoError(t, err)
	b, err := os.ReadFile(second)
	require.NoError(t, err)
	path := first + ".both"
	require.NoError(t, os.WriteFile(path, append(a, b...), 0o600))
	src := file.Lines(path)
	all := runFrom(t, src, nil)
	assert.Equal(t, []string{"a", "b", "c"}, all.items)
	rest := runFrom(t, src, all.pos[1])
	assert.Equal(t, []string{"c"}, rest.items, "a resume reads across the streams")
}

// A gzip file cut short before a saved position says so, not that the
// position is past the end of the file.
func TestAPositionPastWhereATruncatedGzipFileIsCutSaysSo(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := range 5000 {
		b.WriteString(strings.Repeat(string(rune('a'+i%26)), i%97) + "\n")
	}
	full := write(t, "full.txt.gz", b.String(), true)
	all := runFrom(t, file.Lines(full), nil)
	data, err := os.ReadFile(full)
	require.NoError(t, err)
	cut := write(t, "cut.txt.gz", "", false)
	require.NoError(t, os.WriteFile(cut, data[:len(data)/2], 0o600))
	src := file.Lines(cut)
	require.NoError(t, src.Resume(all.pos[len(all.pos)-1]))
	err = src.Open(context.Background())
	require.ErrorIs(t, err, file.ErrPosition)
	assert.Contains(t, err.Error(), cut)
	assert.Contains(t, err.Error(), "truncated")
}
