package deadletter_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// positioned is sampleEnvelope(i) as emitted at source "orders-csv",
// position i*10 as 8 bytes: binary, with zeros, and a newline for i = 1.
func positioned(i int) deadletter.Envelope {
	env := sampleEnvelope(i)
	env.Source = "orders-csv"
	env.Position = binary.BigEndian.AppendUint64(nil, uint64(i)*10)
	return env
}

// readAllIDs returns the order IDs of every envelope ReadAll reads from
// path, and its errors.
func readAllIDs(t *testing.T, path string) ([]int, []error) {
	t.Helper()
	var envs []deadletter.Envelope
	var errs []error
	for env, err := range deadletter.ReadAll(path) {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		envs = append(envs, env)
	}
	return itemIDs(t, envs), errs
}

// writeAll opens path, writes envs in order and closes it, and returns
// the File's stats.
func writeAll(t *testing.T, path string, envs []deadletter.Envelope, opts ...deadletter.FileOption) deadletter.FileStats {
	t.Helper()
	f, err := deadletter.OpenFile(path, opts...)
	require.NoError(t, err)
	for _, env := range envs {
		require.NoError(t, f.Write(t.Context(), env))
	}
	stats := f.Stats()
	require.NoError(t, f.Close())
	return stats
}

func positionedRange(from, to int) []deadletter.Envelope {
	var envs []deadletter.Envelope
	for i := from; i < to; i++ {
		envs = append(envs, positioned(i))
	}
	return envs
}

func TestFileRoundTripsSourceAndPosition(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	writeAll(t, path, []deadletter.Envelope{positioned(1), sampleEnvelope(2)})
	envs, errs := readBack(t, path)
	require.Empty(t, errs)
	require.Len(t, envs, 2)
	assert.Equal(t, "orders-csv", envs[0].Source)
	assert.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0, 10}, envs[0].Position)
	assert.Empty(t, envs[1].Source)
	assert.Empty(t, envs[1].Position)

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"correlation_id":"order-1","source":"orders-csv","position":"AAAAAAAAAAo=","attempts"`,
		"the position is base64, after the correlation ID")
	assert.NotContains(t, string(data), `"correlation_id":"order-2","source"`, "no position, no fields")
}

func TestFileWritesOneEnvelopePerKey(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	f, err := deadletter.OpenFile(path)
	require.NoError(t, err)
	require.NoError(t, f.Write(t.Context(), positioned(1)))
	again := positioned(1)
	again.RunID = "run-2" // a later run: the key leaves the run out
	again.Attempts = 5
	again.Err = errors.New("another error")
	require.NoError(t, f.Write(t.Context(), again), "a duplicate counts as written")
	stats := f.Stats()
	require.NoError(t, f.Close())

	assert.Equal(t, int64(1), stats.Writes)
	assert.Equal(t, int64(1), stats.Duplicates)
	assert.Equal(t, int64(1), stats.Syncs, "a duplicate costs no fsync")
	envs, errs := readBack(t, path)
	assert.Empty(t, errs)
	require.Len(t, envs, 1)
	assert.Equal(t, "run-1", envs[0].RunID, "the first envelope stays")
}

func TestFileKeyTellsItemsApart(t *testing.T) {
	t.Parallel()
	base := positioned(1)
	// Each differs from base in one part of the key, and each is written.
	variants := map[string]func(*deadletter.Envelope){
		"another item at the same position (a FlatMap part)": func(e *deadletter.Envelope) { e.Item = order{ID: 1, Total: "1.00"} },
		"another origin node":                                func(e *deadletter.Envelope) { e.OriginNode = "store" },
		"another source":                                     func(e *deadletter.Envelope) { e.Source = "returns-csv" },
		"another pipeline":                                   func(e *deadletter.Envelope) { e.Pipeline = "returns" },
		"another position":                                   func(e *deadletter.Envelope) { e.Position = []byte{0, 0, 0, 0, 0, 0, 0, 11} },
		"a longer position":                                  func(e *deadletter.Envelope) { e.Position = append(e.Position, 0) },
		"another item type":                                  func(e *deadletter.Envelope) { e.ItemType = "github.com/acme/shop.Order" },
		"fields shifted":                                     func(e *deadletter.Envelope) { e.Source, e.OriginNode = "orders-csvp", "rice" },
		"the item unencodable":                               func(e *deadletter.Envelope) { e.Item = math.NaN() },
	}
	envs := []deadletter.Envelope{base}
	for _, change := range variants {
		env := positioned(1)
		change(&env)
		envs = append(envs, env)
	}
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	stats := writeAll(t, path, envs)
	assert.Equal(t, int64(len(envs)), stats.Writes)
	assert.Zero(t, stats.Duplicates)

	// Opened again, the file holds each of them, and knows them apart.
	stats = writeAll(t, path, envs)
	assert.Zero(t, stats.Writes)
	assert.Equal(t, int64(len(envs)), stats.Duplicates)
	got, errs := readBack(t, path)
	assert.Empty(t, errs)
	assert.Len(t, got, len(envs))
}

func TestFileWritesEveryEnvelopeWithoutPosition(t *testing.T) {
	t.Parallel()
	noPosition := sampleEnvelope(1)
	emptyPosition := sampleEnvelope(2)
	emptyPosition.Source, emptyPosition.Position = "orders-csv", []byte{}
	envs := []deadletter.Envelope{noPosition, noPosition, emptyPosition, emptyPosition}
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	stats := writeAll(t, path, envs)
	assert.Equal(t, int64(4), stats.Writes)
	stats = writeAll(t, path, envs)
	assert.Equal(t, int64(4), stats.Writes, "after a reopen too")
	assert.Zero(t, stats.Duplicates)
	ids, errs := readAllIDs(t, path)
	assert.Empty(t, errs)
	assert.Equal(t, []int{1, 1, 2, 2, 1, 1, 2, 2}, ids)
}

func TestFileHoldsWhatItHeldBeforeReopen(t *testing.T) {
	t.Parallel()
	// Items of every kind the encoder meets: the key read back from the
	// file must be the key of the envelope written again.
	items := map[string]any{
		"struct":           order{ID: 1, Total: "<9.99> & more"},
		"nil":              nil,
		"raw JSON":         json.RawMessage(`{"id": 2, "note": "\u003cb\u003e"}`),
		"unicode":          map[string]any{"name": "Zoë ✓", "emoji": "🙂"},
		"not encodable":    math.Inf(1),
		"channel":          make(chan int),
		"float and string": []any{1.5, "x\ty\n"},
	}
	for name, item := range items {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := positioned(7)
			env.Item = item
			path := filepath.Join(t.TempDir(), "dlq.jsonl")
			assert.Equal(t, int64(1), writeAll(t, path, []deadletter.Envelope{env}).Writes)
			stats := writeAll(t, path, []deadletter.Envelope{env})
			assert.Zero(t, stats.Writes)
			assert.Equal(t, int64(1), stats.Duplicates)
			got, errs := readBack(t, path)
			assert.Empty(t, errs)
			assert.Len(t, got, 1)
		})
	}
}

func TestFileReplayWritesOnlyWhatIsNew(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	writeAll(t, path, positionedRange(0, 5))
	// The resumed run replays from an earlier checkpoint: 3 and 4 again,
	// then new items.
	stats := writeAll(t, path, positionedRange(3, 8))
	assert.Equal(t, int64(3), stats.Writes)
	assert.Equal(t, int64(2), stats.Duplicates)
	ids, errs := readAllIDs(t, path)
	assert.Empty(t, errs)
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, ids)
}

func TestFileHoldsTheEnvelopesOfRotatedFiles(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	writeAll(t, path, positionedRange(1, 2))
	info, err := os.Stat(path)
	require.NoError(t, err)
	size := info.Size()
	require.NoError(t, os.Remove(path))
	stats := writeAll(t, path, positionedRange(0, 8), deadletter.WithMaxBytes(3*size))
	require.Equal(t, int64(2), stats.Rotations)

	stats = writeAll(t, path, positionedRange(0, 10), deadletter.WithMaxBytes(3*size))
	assert.Equal(t, int64(2), stats.Writes, "only 8 and 9 are new")
	assert.Equal(t, int64(8), stats.Duplicates, "the rotated files' envelopes count")
	ids, errs := readAllIDs(t, path)
	assert.Empty(t, errs)
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, ids)

	// A run that gives itself a file of its own with Rotate still holds
	// what the runs before it wrote.
	f, err := deadletter.OpenFile(path)
	require.NoError(t, err)
	require.NoError(t, f.Rotate())
	assert.Zero(t, f.Stats().Size)
	for _, env := range positionedRange(5, 12) {
		require.NoError(t, f.Write(t.Context(), env))
	}
	stats = f.Stats()
	require.NoError(t, f.Close())
	assert.Equal(t, int64(2), stats.Writes)
	envs, errs := readBack(t, path)
	assert.Empty(t, errs)
	assert.Equal(t, []int{10, 11}, itemIDs(t, envs), "the run's own file has its new dead letters")
	ids, errs = readAllIDs(t, path)
	assert.Empty(t, errs)
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, ids)
}

func TestOpenFileFailsOnARotatedFileItCannotRead(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	require.NoError(t, os.Symlink(filepath.Join(t.TempDir(), "gone"), path+".000001"))
	_, err := deadletter.OpenFile(path)
	require.Error(t, err)
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), "dlq.jsonl.000001")
}

// lineEnds returns the offset just past each line of the file at path.
func lineEnds(t *testing.T, path string) []int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var ends []int64
	for i, b := range data {
		if b == '\n' {
			ends = append(ends, int64(i+1))
		}
	}
	return ends
}

func TestFileWritesAgainAnEnvelopeATornLineLost(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	writeAll(t, path, positionedRange(0, 3))
	ends := lineEnds(t, path)
	// A crash in the middle of writing envelope 2.
	require.NoError(t, os.Truncate(path, ends[1]+40))

	stats := writeAll(t, path, positionedRange(0, 3))
	assert.Equal(t, int64(1), stats.Writes, "the torn envelope is written again")
	assert.Equal(t, int64(2), stats.Duplicates)
	ids, errs := readAllIDs(t, path)
	assert.Equal(t, []int{0, 1, 2}, ids)
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0], deadletter.ErrCorruptLine, "the fragment, ended by OpenFile")
}

func TestFileHoldsAnEnvelopeThatLostOnlyItsNewline(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	writeAll(t, path, positionedRange(0, 3))
	ends := lineEnds(t, path)
	require.NoError(t, os.Truncate(path, ends[2]-1))
	ids, errs := readAllIDs(t, path)
	require.Empty(t, errs)
	require.Equal(t, []int{0, 1, 2}, ids, "readers take the last line for whole")

	// So does OpenFile: a replay does not write it again.
	stats := writeAll(t, path, positionedRange(0, 4))
	assert.Equal(t, int64(1), stats.Writes)
	assert.Equal(t, int64(3), stats.Duplicates)
	ids, errs = readAllIDs(t, path)
	assert.Empty(t, errs)
	assert.Equal(t, []int{0, 1, 2, 3}, ids)
}

func TestFileWritesAgainAnEnvelopeLostBeforeItsSync(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	writeAll(t, path, positionedRange(0, 4))
	ends := lineEnds(t, path)
	// The machine went down before the last two lines reached the disk:
	// their Writes never returned, and the file ends after envelope 1.
	require.NoError(t, os.Truncate(path, ends[1]))

	stats := writeAll(t, path, positionedRange(0, 4))
	assert.Equal(t, int64(2), stats.Writes, "the replay writes the lost envelopes")
	assert.Equal(t, int64(2), stats.Duplicates)
	ids, errs := readAllIDs(t, path)
	assert.Empty(t, errs)
	assert.Equal(t, []int{0, 1, 2, 3}, ids)
}

func TestFileConcurrentWritesOfOneKeyWriteOnce(t *testing.T) {
	t.Parallel()
	const writers = 16
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	f, err := deadletter.OpenFile(path)
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make([]error, writers*4)
	for w := range writers {
		wg.Go(func() {
			for i := range 4 {
				errs[w*4+i] = f.Write(context.Background(), positioned(i))
			}
		})
	}
	wg.Wait()
	stats := f.Stats()
	require.NoError(t, f.Close())
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, int64(4), stats.Writes)
	assert.Equal(t, int64(writers*4-4), stats.Duplicates)
	envs, rerrs := readBack(t, path)
	assert.Empty(t, rerrs)
	assert.ElementsMatch(t, []int{0, 1, 2, 3}, itemIDs(t, envs))
}

func TestGroupCommitDuplicateWaitsForTheSyncOfItsLine(t *testing.T) {
	t.Parallel()
	f, clock, path := openGroupCommit(t)
	ctx := t.Context()

	const writers = 8
	var dones []<-chan error
	for range writers {
		dones = append(dones, goWrite(ctx, f, positioned(1)))
	}
	waitUntil(t, func() bool { s := f.Stats(); return s.Writes+s.Duplicates == writers })
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	for _, done := range dones {
		// A duplicate that returned now would report as durable a line
		// that a crash could still lose.
		requireWaiting(t, done)
	}
	clock.Advance(interval)
	for _, done := range dones {
		require.NoError(t, requireDone(t, done))
	}
	stats := f.Stats()
	assert.Equal(t, int64(1), stats.Writes)
	assert.Equal(t, int64(writers-1), stats.Duplicates)
	assert.Equal(t, int64(1), stats.Syncs)

	// Once its line is synced, a duplicate returns at once.
	require.NoError(t, f.Write(ctx, positioned(1)))
	assert.Equal(t, int64(writers), f.Stats().Duplicates)
	envs, errs := readBack(t, path)
	assert.Empty(t, errs)
	assert.Equal(t, []int{1}, itemIDs(t, envs))
}

func TestGroupCommitDuplicateGivesUpWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	f, clock, path := openGroupCommit(t)
	first := goWrite(t.Context(), f, positioned(1))
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))

	ctx, cancel := context.WithCancel(t.Context())
	second := goWrite(ctx, f, positioned(1))
	waitUntil(t, func() bool { return f.Stats().Duplicates == 1 })
	cancel()
	err := requireDone(t, second)
	require.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "written, not yet synced")
	requireWaiting(t, first)

	clock.Advance(interval)
	require.NoError(t, requireDone(t, first))
	envs, errs := readBack(t, path)
	assert.Empty(t, errs)
	assert.Equal(t, []int{1}, itemIDs(t, envs))
}

func TestGroupCommitRotationKeepsTheKeys(t *testing.T) {
	t.Parallel()
	f, clock, path := openGroupCommit(t, deadletter.WithMaxBytes(1))
	ctx := t.Context()
	first := goWrite(ctx, f, positioned(1))
	waitUntil(t, func() bool { return f.Stats().Writes == 1 })
	// Envelope 2 rotates the file, which syncs envelope 1's batch.
	second := goWrite(ctx, f, positioned(2))
	require.NoError(t, requireDone(t, first))
	waitUntil(t, func() bool { return f.Stats().Writes == 2 })
	// Envelope 1's line is synced, in the rotated file: its duplicate
	// does not wait; envelope 2's does.
	require.NoError(t, f.Write(ctx, positioned(1)))
	dup := goWrite(ctx, f, positioned(2))
	waitUntil(t, func() bool { return f.Stats().Duplicates == 2 })
	requireWaiting(t, dup)
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(interval)
	require.NoError(t, requireDone(t, second))
	require.NoError(t, requireDone(t, dup))
	ids, errs := readAllIDs(t, path)
	assert.Empty(t, errs)
	assert.Equal(t, []int{1, 2}, ids)
	assert.Equal(t, int64(1), f.Stats().Rotations)
}

func ExampleFile_Write_replay() {
	dir, err := os.MkdirTemp("", "dlq")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "orders.dlq.jsonl")
	env := deadletter.Envelope{
		Item: "order 42", Pipeline: "orders", OriginNode: "price", DecisionNode: "price",
		Source: "orders-csv", Position: []byte("4096"), ErrText: "price: status 503",
	}
	// A run dead-letters the item and crashes; the resumed run replays
	// it from its last checkpoint and dead-letters it again.
	for run := 1; run <= 2; run++ {
		f, err := deadletter.OpenFile(path)
		if err != nil {
			panic(err)
		}
		if err := f.Write(context.Background(), env); err != nil {
			panic(err)
		}
		s := f.Stats()
		fmt.Printf("run %d: writes %d, duplicates %d\n", run, s.Writes, s.Duplicates)
		if err := f.Close(); err != nil {
			panic(err)
		}
	}
	n := 0
	for _, err := range deadletter.ReadAll(path) {
		if err != nil {
			panic(err)
		}
		n++
	}
	fmt.Println(n, "envelope in the file")
	// Output:
	// run 1: writes 1, duplicates 0
	// run 2: writes 0, duplicates 1
	// 1 envelope in the file
}
