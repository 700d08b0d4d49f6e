package file_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/connector/file"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

func TestLinesEmitsEveryLineWithoutItsEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, content string
		want          []string
	}{
		{"trailing newline", "a\nb\n", []string{"a", "b"}},
		{"no trailing newline", "a\nb", []string{"a", "b"}},
		{"CRLF", "a\r\n\r\nb\r\n", []string{"a", "", "b"}},
		{"empty lines", "\n\na\n\n", []string{"", "", "a", ""}},
		{"BOM skipped", "\ufeffa\nb\n", []string{"a", "b"}},
		{"only a BOM", "\ufeff", nil},
		{"empty file", "", nil},
		{"lone CR kept inside", "a\rb\n", []string{"a\rb"}},
	} {
		for _, zip := range []bool{false, true} {
			t.Run(tc.name+map[bool]string{true: " gzip"}[zip], func(t *testing.T) {
				t.Parallel()
				src := file.Lines(write(t, "in.txt", tc.content, zip))
				r := runFrom(t, src, nil)
				assert.Equal(t, tc.want, r.items)
				if zip {
					assert.Equal(t, int64(-1), src.Size())
				} else {
					assert.Equal(t, int64(len(tc.want)), src.Size())
				}
			})
		}
	}
}

func TestLinesLongerThanAnyBuffer(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 1<<20+17)
	content := "a\n" + long + "\r\nb\n" + long
	src := file.Lines(write(t, "in.txt", content, false))
	r := runFrom(t, src, nil)
	require.Len(t, r.items, 4)
	assert.Equal(t, []string{"a", long, "b", long}, r.items)
	// Resuming after the first long line goes on with "b".
	rest := runFrom(t, file.Lines(src.Path()), r.pos[1])
	assert.Equal(t, []string{"b", long}, rest.items)
}

func TestAMissingFileFailsOpenNamingThePath(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/missing.csv"
	src := file.CSV(path, file.CSVOptions{Header: true})
	err := src.Open(context.Background())
	require.Error(t, err)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.Contains(t, err.Error(), path)
	assert.True(t, strings.HasPrefix(err.Error(), "file: "), err.Error())
	// Run without Open says the same.
	err = src.Run(context.Background(), &recorder[file.Record]{})
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.Equal(t, int64(-1), src.Size())
}

func TestRunAgainGoesOnAfterTheLastItemEmitted(t *testing.T) {
	t.Parallel()
	src := file.Lines(write(t, "in.txt", "a\nb\nc\nd\n", false))
	require.NoError(t, src.Resume(nil))
	ctx := context.Background()
	require.NoError(t, src.Open(ctx))
	first := &recorder[string]{failAt: 3}
	require.ErrorIs(t, src.Run(ctx, first), errStopped)
	assert.Equal(t, []string{"a", "b"}, first.items)
	require.NoError(t, src.Close(ctx))

	// A node restart opens and runs the source again: "c", which the
	// emitter refused, comes next.
	require.NoError(t, src.Open(ctx))
	second := &recorder[string]{}
	require.NoError(t, src.Run(ctx, second))
	require.NoError(t, src.Close(ctx))
	assert.Equal(t, []string{"c", "d"}, second.items)
	assert.Equal(t, int64(4), src.Size(), "the size is the run's, counted at its first Open")

	// Resume(nil) starts over.
	again := runFrom(t, src, nil)
	assert.Equal(t, []string{"a", "b", "c", "d"}, again.items)
}

func TestRunStopsWhenTheContextIsDone(t *testing.T) {
	t.Parallel()
	src := file.Lines(write(t, "in.txt", "a\nb\n", false))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := src.Run(ctx, &recorder[string]{})
	assert.ErrorIs(t, err, context.Canceled)
}

func TestSizeAndBadRowsAreSafeToReadDuringARun(t *testing.T) {
	t.Parallel()
	src := file.JSONL[order](write(t, "in.jsonl", strings.Repeat("{\"id\":1}\nnot json\n", 2000), false))
	src.UseDeadLetter(deadletter.NewMemory(2000), deadletter.Envelope{})
	stop, done := make(chan struct{}), make(chan struct{})
	var seen []int64
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			seen = append(seen, src.Size(), src.BadRows())
		}
	}()
	r := runFrom(t, src, nil)
	close(stop)
	<-done
	assert.Len(t, r.items, 2000)
	assert.Equal(t, int64(2000), src.BadRows())
	assert.Equal(t, int64(4000), src.Size())
	for i := 0; i < len(seen); i += 2 {
		require.True(t, seen[i] == -1 || seen[i] == 4000, "size %d", seen[i])
		require.True(t, seen[i+1] >= 0 && seen[i+1] <= 2000, "bad rows %d", seen[i+1])
	}
}
