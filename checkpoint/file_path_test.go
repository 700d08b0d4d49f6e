package checkpoint_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// A symbolic link set up before the first run, to a file not created yet,
// is followed: the file is created where the link points, saves go there,
// the link stays a link, and the link and the file share one lock. The
// link's target may be absolute, relative to the link's directory, or
// another link; a loop of links is an error.
func TestOpenFileThroughALinkToAFileNotCreatedYet(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("symbolic links need privileges")
	}
	for _, tc := range []struct {
		name string
		link func(t *testing.T, dir, real string) string
	}{
		{"absolute", func(t *testing.T, dir, real string) string {
			link := filepath.Join(dir, "positions.json")
			require.NoError(t, os.Symlink(real, link))
			return link
		}},
		{"relative", func(t *testing.T, dir, _ string) string {
			link := filepath.Join(dir, "positions.json")
			require.NoError(t, os.Symlink(filepath.Join("data", "positions.json"), link))
			return link
		}},
		{"link to a link", func(t *testing.T, dir, real string) string {
			first := filepath.Join(dir, "first.json")
			require.NoError(t, os.Symlink(real, first))
			link := filepath.Join(dir, "positions.json")
			require.NoError(t, os.Symlink("first.json", link))
			return link
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			require.NoError(t, os.Mkdir(filepath.Join(dir, "data"), 0o700))
			real := filepath.Join(dir, "data", "positions.json")
			link := tc.link(t, dir, real)
			f := openFile(t, link)
			assert.Equal(t, real, f.Path())
			require.NoError(t, f.Save(context.Background(), "orders", "read", []byte("7")))
			fi, err := os.Lstat(link)
			require.NoError(t, err)
			assert.True(t, fi.Mode()&fs.ModeSymlink != 0, "the link is still a link")
			_, err = checkpoint.OpenFile(real)
			assert.Error(t, err, "the link and the file it points to share one lock")
			require.NoError(t, f.Close())
			g := openFile(t, real)
			pos, err := g.Load(context.Background(), "orders", "read")
			require.NoError(t, err)
			assert.Equal(t, "7", string(pos), "saved in the file the link points to")
		})
	}
	t.Run("loop", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
		require.NoError(t, os.Symlink(b, a))
		require.NoError(t, os.Symlink(a, b))
		_, err := checkpoint.OpenFile(a)
		require.Error(t, err)
		assert.Contains(t, err.Error(), a)
	})
}

// A relative path is made absolute as the file opens: after the process
// changes its working directory, saves still go to the file opened and
// locked, and its lock still keeps a second File off it.
func TestOpenFileRelativePathSurvivesChdir(t *testing.T) {
	first, second := t.TempDir(), t.TempDir()
	t.Chdir(first)
	f := openFile(t, "positions.json")
	want, err := filepath.Abs("positions.json")
	require.NoError(t, err)
	assert.Equal(t, want, f.Path())
	t.Chdir(second)
	require.NoError(t, f.Save(context.Background(), "orders", "read", []byte("42")))
	_, err = os.Stat(filepath.Join(second, "positions.json"))
	assert.ErrorIs(t, err, fs.ErrNotExist, "nothing written in the new working directory")
	_, err = checkpoint.OpenFile(filepath.Join(first, "positions.json"))
	assert.Error(t, err, "the lock still holds the file opened")
	require.NoError(t, f.Close())
	g := openFile(t, filepath.Join(first, "positions.json"))
	pos, err := g.Load(context.Background(), "orders", "read")
	require.NoError(t, err)
	assert.Equal(t, "42", string(pos))
}

// A path through a linked directory and back out of it ("link/..") names
// a file beside the link's target, as the system reads it, not beside the
// link: OpenFile does not clean the path as text before resolving it,
// given relative or absolute, nor the target of a link to a file not
// created yet.
func TestOpenFileDotDotThroughALinkedDirectory(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("symbolic links need privileges")
	}
	root := t.TempDir()
	real := filepath.Join(root, "a", "b")
	require.NoError(t, os.MkdirAll(real, 0o755))
	work := filepath.Join(root, "work")
	require.NoError(t, os.MkdirAll(work, 0o755))
	require.NoError(t, os.Symlink(real, filepath.Join(work, "link")))
	want := filepath.Join(root, "a", "cp.json") // where open("work/link/../cp.json") lands
	save := func(path string) {
		t.Helper()
		f, err := checkpoint.OpenFile(path)
		require.NoError(t, err)
		assert.Equal(t, want, f.Path())
		require.NoError(t, f.Save(context.Background(), "p", "s", []byte("x")))
		require.NoError(t, f.Close())
		_, err = os.Stat(want)
		require.NoError(t, err, "saved where the path names")
		require.NoError(t, os.Remove(want))
	}
	save(filepath.Join(work, "link") + "/../cp.json")
	t.Chdir(work)
	save("link/../cp.json")
	// A link, to a file not created yet, whose target goes through the
	// linked directory and out of it.
	require.NoError(t, os.Symlink("link/../cp.json", filepath.Join(work, "positions.json")))
	save("positions.json")
}

// A path that names a directory ("dir/", "dir/.", "dir/..") is refused,
// saying so, and leaves no lock file behind.
func TestOpenFileRefusesADirectoryPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	require.NoError(t, os.Mkdir(sub, 0o700))
	for _, path := range []string{sub + "/", sub + "/.", sub + "/.."} {
		_, err := checkpoint.OpenFile(path)
		require.Error(t, err, path)
		assert.Contains(t, err.Error(), "names a directory")
	}
	for _, d := range []string{dir, sub} {
		entries, err := os.ReadDir(d)
		require.NoError(t, err)
		for _, e := range entries {
			assert.Equal(t, "sub", e.Name(), "nothing left in %s", d)
		}
	}
}
