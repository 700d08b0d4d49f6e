package deadletter_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// lineSize is the length of sampleEnvelope(i)'s line for a one-digit i.
func lineSize(t *testing.T) int64 {
	t.Helper()
	info, err := os.Stat(writeFile(t, 1))
	require.NoError(t, err)
	return info.Size()
}

func TestRotationBySize(t *testing.T) {
	t.Parallel()
	size := lineSize(t)
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	write := func(from, to int) *deadletter.File {
		f, err := deadletter.OpenFile(path, deadletter.WithMaxBytes(3*size))
		require.NoError(t, err)
		for i := from; i < to; i++ {
			require.NoError(t, f.Write(t.Context(), sampleEnvelope(i)))
		}
		return f
	}
	f := write(0, 8)
	stats := f.Stats()
	require.NoError(t, f.Close())
	assert.Equal(t, int64(2), stats.Rotations)
	assert.Equal(t, 2*size, stats.Size)

	rotated, err := deadletter.Rotated(path)
	require.NoError(t, err)
	assert.Equal(t, []string{path + ".000001", path + ".000002"}, rotated)
	for i, want := range [][]int{{0, 1, 2}, {3, 4, 5}} {
		envs, errs := readBack(t, rotated[i])
		assert.Empty(t, errs)
		assert.Equal(t, want, itemIDs(t, envs), rotated[i])
	}
	envs, errs := readBack(t, path)
	assert.Empty(t, errs)
	assert.Equal(t, []int{6, 7}, itemIDs(t, envs), "ReadFile reads the one file")

	// Opened again, the sink goes on numbering after the newest rotation.
	require.NoError(t, write(8, 10).Close())
	rotated, err = deadletter.Rotated(path)
	require.NoError(t, err)
	assert.Equal(t, []string{path + ".000001", path + ".000002", path + ".000003"}, rotated)

	var all []deadletter.Envelope
	for env, err := range deadletter.ReadAll(path) {
		require.NoError(t, err)
		all = append(all, env)
	}
	assert.Equal(t, seq(10), itemIDs(t, all), "ReadAll reads every file, oldest first")
}

func TestRotationGivesALongLineAFileOfItsOwn(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	f, err := deadletter.OpenFile(path, deadletter.WithMaxBytes(10))
	require.NoError(t, err)
	for i := range 3 {
		require.NoError(t, f.Write(t.Context(), sampleEnvelope(i)))
	}
	require.NoError(t, f.Close())
	rotated, err := deadletter.Rotated(path)
	require.NoError(t, err)
	require.Len(t, rotated, 2, "no empty file is rotated away")
	for i, p := range append(rotated, path) {
		envs, errs := readBack(t, p)
		assert.Empty(t, errs)
		assert.Equal(t, []int{i}, itemIDs(t, envs))
	}
}

func TestRotatedSortsByNumber(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "dlq.jsonl")
	for _, name := range []string{
		"dlq.jsonl.000010", "dlq.jsonl.1000000", "dlq.jsonl.000002", "dlq.jsonl",
		"dlq.jsonl.x", "dlq.jsonl.000001.bak", "dlq.jsonl.", "dlq.jsonl.000000", "other.jsonl.000003",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), nil, 0o600))
	}
	rotated, err := deadletter.Rotated(path)
	require.NoError(t, err)
	assert.Equal(t, []string{path + ".000002", path + ".000010", path + ".1000000"}, rotated)

	rotated, err = deadletter.Rotated(filepath.Join(dir, "missing", "dlq.jsonl"))
	assert.NoError(t, err)
	assert.Empty(t, rotated)
}

func TestReadAllWithoutLiveFile(t *testing.T) {
	t.Parallel()
	// A crash between the rename and the creation of the new file leaves
	// only rotated files.
	path := writeFile(t, 2)
	require.NoError(t, os.Rename(path, path+".000001"))
	var ids []deadletter.Envelope
	for env, err := range deadletter.ReadAll(path) {
		require.NoError(t, err)
		ids = append(ids, env)
	}
	assert.Equal(t, []int{0, 1}, itemIDs(t, ids))

	// With no file at all, ReadAll reports the missing file.
	var errs []error
	for _, err := range deadletter.ReadAll(path + ".other") {
		errs = append(errs, err)
	}
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0], os.ErrNotExist)
}

// Rotate after OpenFile gives each run a file of its own: an empty file
// is not rotated, and ReadAll still reads every run's letters in order.
func TestRotateGivesEachRunItsOwnFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	run := func(from, to int) {
		f, err := deadletter.OpenFile(path)
		require.NoError(t, err)
		require.NoError(t, f.Rotate())
		for i := from; i < to; i++ {
			require.NoError(t, f.Write(t.Context(), sampleEnvelope(i)))
		}
		require.NoError(t, f.Close())
		envs, errs := readBack(t, path)
		assert.Empty(t, errs)
		assert.Equal(t, seq(to)[from:], itemIDs(t, envs), "the file holds this run's letters")
	}
	run(0, 3)
	run(3, 3) // a run without dead letters
	run(3, 5)
	rotated, err := deadletter.Rotated(path)
	require.NoError(t, err)
	assert.Equal(t, []string{path + ".000001"}, rotated, "the empty file was not rotated")
	var all []deadletter.Envelope
	for env, err := range deadletter.ReadAll(path) {
		require.NoError(t, err)
		all = append(all, env)
	}
	assert.Equal(t, seq(5), itemIDs(t, all))

	f, err := deadletter.OpenFile(path)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	assert.ErrorIs(t, f.Rotate(), deadletter.ErrClosed)
}
