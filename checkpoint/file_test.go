package checkpoint_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

func TestOpenFileCreatesTheFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "positions.json")
	f := openFile(t, path)
	fi, err := os.Stat(path)
	require.NoError(t, err, "the file exists once OpenFile returned")
	if runtime.GOOS != "windows" {
		assert.Equal(t, checkpoint.DefaultFileMode, fi.Mode().Perm())
	}
	assert.Equal(t, path, f.Path())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "{\"format\":\"sluice-checkpoint\",\"version\":1,\"positions\":[\n]}\n", string(data))
}

// The file is JSON, one position a line, in base64, sorted by pipeline and
// source.
func TestFileFormat(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "positions.json")
	f := openFile(t, path)
	ctx := context.Background()
	require.NoError(t, f.Save(ctx, "orders", "read", []byte("offset=1024")))
	require.NoError(t, f.Save(ctx, "invoices", "<read>", []byte{0, 1}))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, `{"format":"sluice-checkpoint","version":1,"positions":[
{"pipeline":"invoices","source":"<read>","position":"AAE="},
{"pipeline":"orders","source":"read","position":"b2Zmc2V0PTEwMjQ="}
]}
`, string(data))
	var v map[string]any
	assert.NoError(t, json.Unmarshal(data, &v), "any JSON reader reads it")
}

func TestOpenFileNeedsTheDirectory(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "missing", "positions.json")
	_, err := checkpoint.OpenFile(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
	assert.Contains(t, err.Error(), "does not exist (OpenFile does not create it)")

	_, err = checkpoint.OpenFile("")
	assert.EqualError(t, err, "checkpoint: OpenFile: the path is empty")

	dir := t.TempDir()
	_, err = checkpoint.OpenFile(dir)
	assert.Error(t, err, "a directory")
	assert.Contains(t, err.Error(), "not a regular file")
}

// A file that is not a checkpoint file is an error naming it, and is left
// as it is.
func TestOpenFileRefusesACorruptFile(t *testing.T) {
	t.Parallel()
	for name, content := range map[string]string{
		"empty":           "",
		"not JSON":        "offset=1024\n",
		"truncated":       `{"format":"sluice-checkpoint","version":1,"positions":[{"pipeline":"orders","sou`,
		"another format":  `{"format":"something else","version":1,"positions":[]}`,
		"a later version": `{"format":"sluice-checkpoint","version":2,"positions":[]}`,
		"no position":     `{"format":"sluice-checkpoint","version":1,"positions":[{"pipeline":"p","source":"s"}]}`,
		"a pair twice": `{"format":"sluice-checkpoint","version":1,"positions":[` +
			`{"pipeline":"p","source":"s","position":""},{"pipeline":"p","source":"s","position":"AA=="}]}`,
		"bad base64":       `{"format":"sluice-checkpoint","version":1,"positions":[{"pipeline":"p","source":"s","position":"!!"}]}`,
		"a field misspelt": `{"format":"sluice-checkpoint","version":1,"positions":[{"pipeline":"p","source":"s","postion":""}]}`,
		"trailing data":    `{"format":"sluice-checkpoint","version":1,"positions":[]}{}`,
		"no positions":     `{"format":"sluice-checkpoint","version":1}`,
		"null positions":   `{"format":"sluice-checkpoint","version":1,"positions":null}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "positions.json")
			require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
			_, err := checkpoint.OpenFile(path)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "checkpoint: "+path+" is not a checkpoint file")
			assert.Contains(t, err.Error(), "move it aside to start every source from its beginning")
			data, rerr := os.ReadFile(path)
			require.NoError(t, rerr)
			assert.Equal(t, content, string(data), "the file is left as it is")
			f := openFile(t, filepath.Join(filepath.Dir(path), "other.json"))
			assert.NotNil(t, f, "the lock of the refused file is released")
			_, err = checkpoint.OpenFile(path)
			assert.Contains(t, err.Error(), "is not a checkpoint file", "a second try fails the same, not on the lock")
		})
	}
}

func TestOneProcessPerFile(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("no flock")
	}
	path := filepath.Join(t.TempDir(), "positions.json")
	f := openFile(t, path)
	_, err := checkpoint.OpenFile(path)
	require.Error(t, err, "a second open of the file, as another process would")
	assert.Contains(t, err.Error(), "another process uses the checkpoint file (it holds the lock "+path+".lock)")
	require.NoError(t, f.Close())
	g := openFile(t, path)
	assert.NotNil(t, g, "Close released the lock")
}

func TestOpenFileRemovesAnUnfinishedSave(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "positions.json")
	f := openFile(t, path)
	require.NoError(t, f.Save(context.Background(), "orders", "read", []byte("old")))
	require.NoError(t, f.Close())
	require.NoError(t, os.WriteFile(path+".tmp", []byte(`{"format":"sluice-chec`), 0o600), "a save killed before its rename")

	f = openFile(t, path)
	_, err := os.Stat(path + ".tmp")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	pos, err := f.Load(context.Background(), "orders", "read")
	require.NoError(t, err)
	assert.Equal(t, "old", string(pos))
}

func TestSavesKeepTheFileMode(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("no Unix modes")
	}
	path := filepath.Join(t.TempDir(), "positions.json")
	f := openFile(t, path)
	require.NoError(t, f.Close())
	require.NoError(t, os.Chmod(path, 0o664))
	f = openFile(t, path)
	require.NoError(t, f.Save(context.Background(), "orders", "read", []byte("1")))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o664), fi.Mode().Perm(), "the mode the file had, whatever the umask")
}

func TestOpenFileFollowsASymbolicLink(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("symbolic links need privileges")
	}
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "data"), 0o700))
	real := filepath.Join(dir, "data", "positions.json")
	openFile(t, real).Close()
	link := filepath.Join(dir, "positions.json")
	require.NoError(t, os.Symlink(real, link))

	f := openFile(t, link)
	assert.Equal(t, real, f.Path())
	require.NoError(t, f.Save(context.Background(), "orders", "read", []byte("1")))
	fi, err := os.Lstat(link)
	require.NoError(t, err)
	assert.True(t, fi.Mode()&fs.ModeSymlink != 0, "the link is still a link")
	_, err = checkpoint.OpenFile(real)
	assert.Error(t, err, "the link and the file it points to share one lock")
	require.NoError(t, f.Close())
	g, err := checkpoint.OpenFile(real)
	require.NoError(t, err)
	defer g.Close()
	pos, err := g.Load(context.Background(), "orders", "read")
	require.NoError(t, err)
	assert.Equal(t, "1", string(pos), "the save went to the file the link points to")
}

// A Save of the position the file holds writes nothing: an idle pipeline
// that checkpoints every second costs no disk writes.
func TestSaveOfTheSamePositionWritesNothing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "positions.json")
	f := openFile(t, path)
	ctx := context.Background()
	require.NoError(t, f.Save(ctx, "orders", "read", []byte("1")))
	before, err := os.Stat(path)
	require.NoError(t, err)
	require.NoError(t, f.Save(ctx, "orders", "read", []byte("1")))
	same, err := os.Stat(path)
	require.NoError(t, err)
	assert.True(t, os.SameFile(before, same), "no new file")
	require.NoError(t, f.Save(ctx, "orders", "read", []byte("2")))
	after, err := os.Stat(path)
	require.NoError(t, err)
	assert.False(t, os.SameFile(before, after), "a new position is a new file")
}

// A Save that failed to write is written by the next Save, even of the
// same position; the file never holds a half.
func TestFailedSaveIsWrittenByTheNext(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "positions.json")
	f := openFile(t, path)
	ctx := context.Background()
	require.NoError(t, f.Save(ctx, "orders", "read", []byte("1")))
	require.NoError(t, os.Mkdir(path+".tmp", 0o700), "the temporary file cannot be made")
	err := f.Save(ctx, "orders", "read", []byte("2"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "checkpoint: save "+path+": ")
	data, rerr := os.ReadFile(path)
	require.NoError(t, rerr)
	assert.Contains(t, string(data), `"position":"MQ=="`, "the file still holds 1")

	require.NoError(t, os.Remove(path+".tmp"))
	require.NoError(t, f.Save(ctx, "orders", "read", []byte("2")), "the same position again")
	require.NoError(t, f.Close())
	g := openFile(t, path)
	pos, err := g.Load(ctx, "orders", "read")
	require.NoError(t, err)
	assert.Equal(t, "2", string(pos))
}

func TestClosedFile(t *testing.T) {
	t.Parallel()
	f := openFile(t, filepath.Join(t.TempDir(), "positions.json"))
	require.NoError(t, f.Close())
	assert.NoError(t, f.Close(), "Close again does nothing")
	_, err := f.Load(context.Background(), "orders", "read")
	assert.ErrorIs(t, err, fs.ErrClosed)
	err = f.Save(context.Background(), "orders", "read", []byte("1"))
	assert.ErrorIs(t, err, fs.ErrClosed)
}

func TestFileRefusesNamesItCannotKeep(t *testing.T) {
	t.Parallel()
	f := openFile(t, filepath.Join(t.TempDir(), "positions.json"))
	err := f.Save(context.Background(), "orders\xff", "read", []byte("1"))
	assert.EqualError(t, err, `checkpoint: the pipeline name "orders\xff" is not UTF-8 text`)
	err = f.Save(context.Background(), "orders", "re\x00ad", []byte("1"))
	assert.EqualError(t, err, `checkpoint: the source name "re\x00ad" holds a NUL byte`)
}

// A file with an empty list of positions, as a store that saved nothing
// yet writes, opens as an empty store.
func TestOpenFileWithNoPositionsYet(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "positions.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"format":"sluice-checkpoint","version":1,"positions":[]}`), 0o600))
	f := openFile(t, path)
	pos, err := f.Load(context.Background(), "orders", "read")
	require.NoError(t, err)
	assert.Nil(t, pos)
}
