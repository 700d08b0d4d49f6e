package deadletter_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

const interval = 50 * time.Millisecond

// openGroupCommit opens a file with group commit on a fake clock.
func openGroupCommit(t *testing.T, opts ...deadletter.FileOption) (*deadletter.File, *clockwork.FakeClock, string) {
	t.Helper()
	clock := clockwork.NewFakeClock()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	opts = append([]deadletter.FileOption{deadletter.WithGroupCommit(interval), deadletter.WithClock(clock)}, opts...)
	f, err := deadletter.OpenFile(path, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, f.Close()) })
	return f, clock, path
}

// goWrite writes env on a goroutine of its own; the channel gets Write's
// result.
func goWrite(ctx context.Context, f *deadletter.File, env deadletter.Envelope) <-chan error {
	done := make(chan error, 1)
	go func() { done <- f.Write(ctx, env) }()
	return done
}

func requireDone(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second): // a guard against a hang, not a wait
		t.Fatal("Write did not return")
		return nil
	}
}

func requireWaiting(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("Write returned before its line was synced: %v", err)
	default:
	}
}

func TestGroupCommitSyncsAfterTheInterval(t *testing.T) {
	t.Parallel()
	f, clock, path := openGroupCommit(t)
	ctx := t.Context()

	done := goWrite(ctx, f, sampleEnvelope(1))
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the first line of a batch starts the commit timer")
	requireWaiting(t, done)
	clock.Advance(interval - time.Nanosecond)
	requireWaiting(t, done)
	assert.Zero(t, f.Stats().Syncs)

	clock.Advance(time.Nanosecond)
	require.NoError(t, requireDone(t, done))
	assert.Equal(t, int64(1), f.Stats().Syncs)
	envs, errs := readBack(t, path)
	assert.Empty(t, errs)
	assert.Equal(t, []int{1}, itemIDs(t, envs))
}

func TestGroupCommitSharesOneSyncAmongWriters(t *testing.T) {
	t.Parallel()
	f, clock, _ := openGroupCommit(t)
	ctx := t.Context()

	const writers = 10
	var dones []<-chan error
	for i := range writers {
		dones = append(dones, goWrite(ctx, f, sampleEnvelope(i)))
	}
	waitUntil(t, func() bool { return f.Stats().Writes == writers })
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	for _, done := range dones {
		requireWaiting(t, done)
	}
	clock.Advance(interval)
	for _, done := range dones {
		require.NoError(t, requireDone(t, done))
	}
	assert.Equal(t, int64(1), f.Stats().Syncs, "one fsync for the whole batch")

	// The next write opens a new batch with a timer of its own.
	done := goWrite(ctx, f, sampleEnvelope(writers))
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(interval)
	require.NoError(t, requireDone(t, done))
	assert.Equal(t, int64(2), f.Stats().Syncs)
}

func TestGroupCommitCloseSyncsWhatIsPending(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	f, err := deadletter.OpenFile(path, deadletter.WithGroupCommit(interval), deadletter.WithClock(clock))
	require.NoError(t, err)

	done := goWrite(t.Context(), f, sampleEnvelope(1))
	waitUntil(t, func() bool { return f.Stats().Writes == 1 })
	require.NoError(t, f.Close())
	require.NoError(t, requireDone(t, done), "Close released the waiting writer")
	envs, errs := readBack(t, path)
	assert.Empty(t, errs)
	assert.Equal(t, []int{1}, itemIDs(t, envs))
}

func TestGroupCommitWriterGivesUpWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	f, clock, path := openGroupCommit(t)
	ctx, cancel := context.WithCancel(t.Context())

	done := goWrite(ctx, f, sampleEnvelope(1))
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	cancel()
	err := requireDone(t, done)
	require.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "written, not yet synced")

	// The line is in the file all the same, and the next commit syncs it.
	clock.Advance(interval)
	waitUntil(t, func() bool { return f.Stats().Syncs == 1 })
	envs, errs := readBack(t, path)
	assert.Empty(t, errs)
	assert.Equal(t, []int{1}, itemIDs(t, envs))
}

func TestGroupCommitRotationSyncsTheBatchFirst(t *testing.T) {
	t.Parallel()
	f, clock, path := openGroupCommit(t, deadletter.WithMaxBytes(1))
	ctx := t.Context()

	first := goWrite(ctx, f, sampleEnvelope(1))
	waitUntil(t, func() bool { return f.Stats().Writes == 1 })
	requireWaiting(t, first)

	// The second line does not fit: the file rotates, and its lines are
	// synced before it is renamed, without waiting for the clock.
	second := goWrite(ctx, f, sampleEnvelope(2))
	require.NoError(t, requireDone(t, first))
	assert.Equal(t, int64(1), f.Stats().Rotations)
	requireWaiting(t, second)
	waitUntil(t, func() bool { return f.Stats().Writes == 2 })
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "a commit timer covers the new batch")
	clock.Advance(interval)
	require.NoError(t, requireDone(t, second))

	rotated, err := deadletter.Rotated(path)
	require.NoError(t, err)
	require.Equal(t, []string{path + ".000001"}, rotated)
	envs, errs := readBack(t, rotated[0])
	assert.Empty(t, errs)
	assert.Equal(t, []int{1}, itemIDs(t, envs))
	envs, errs = readBack(t, path)
	assert.Empty(t, errs)
	assert.Equal(t, []int{2}, itemIDs(t, envs))
}
