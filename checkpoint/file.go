package checkpoint

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// A File keeps the positions of every pipeline and source of a process in
// one file on the local disk. It is the store for a pipeline that runs on
// one machine; pipelines on several machines that take turns share a
// checkpoint/sqlstore table instead. Make one with [OpenFile]; the zero
// File is not usable.
//
// Load answers from memory: OpenFile read the file. Save writes the whole
// file again, so a File suits the sources of a few dozen pipelines, not
// positions by the million. Saves of several goroutines at once share
// their writes: a Save that finds a write under way waits for it, and the
// next write carries every position saved in the meantime. A Save of the
// position already kept writes nothing.
type File struct {
	path string // the file, symbolic links resolved
	tmp  string // where a save writes before it renames
	perm fs.FileMode
	lock *os.File

	// writing is a one-slot semaphore, held by the Save that writes the
	// file (and by Close).
	writing chan struct{}

	mu      sync.Mutex
	pos     map[pair]kept
	version uint64 // counts the changes of pos
	written uint64 // the version the file holds
	closed  bool
}

// kept is a position of a File, and the version of the File's positions
// that first held it (0: the file read at open).
type kept struct {
	pos     []byte
	version uint64
}

// The file's format: one JSON object, its positions sorted by pipeline
// and source, each in base64.
const (
	fileFormat  = "sluice-checkpoint"
	fileVersion = 1
)

type fileContent struct {
	Format    string      `json:"format"`
	Version   int         `json:"version"`
	Positions []fileEntry `json:"positions"`
}

type fileEntry struct {
	Pipeline string `json:"pipeline"`
	Source   string `json:"source"`
	Position []byte `json:"position"`
}

// DefaultFileMode is the mode of a checkpoint file that [OpenFile]
// creates.
const DefaultFileMode fs.FileMode = 0o600

// OpenFile opens the checkpoint file at path, creating it, empty, if it
// does not exist, and returns a File that keeps its positions there.
//
// A save replaces the file as a whole: it writes path+".tmp", syncs it to
// the disk, renames it over path and syncs the directory, so that a crash
// at any moment, even a SIGKILL or a power cut, leaves either the old or
// the new content, never a mix: once Save returned nil, the new position
// is on the disk. A temporary file that a crash left behind is removed
// here.
//
// The directory must exist: OpenFile does not create it. A file it creates
// has mode [DefaultFileMode] (0600); a file that exists keeps its mode
// across saves (not its owner: each save writes a new file, owned by the
// process). When path is a symbolic link, the file it points to is the one
// replaced, and created if it does not exist yet. A relative path is made
// absolute here: a later change of the working directory moves nothing.
//
// One process at a time uses a checkpoint file: OpenFile takes a lock on
// path+".lock" (an flock, dropped by the system however the process ends;
// not taken on systems without flock) and fails when another process
// holds it. Two processes that saved to one file would each overwrite the
// other's positions. Within the process, open the file once and share the
// File, which is safe for concurrent use.
//
// A file that holds something else than positions (damaged, truncated,
// edited by hand, or empty) is an error naming the path: OpenFile never
// starts over on its own, since that would replay every source from its
// beginning. Move the file aside to do so.
//
// Call [File.Close] when done, to release the lock.
func OpenFile(path string) (*File, error) {
	if path == "" {
		return nil, errors.New("checkpoint: OpenFile: the path is empty")
	}
	real, err := resolve(path)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(filepath.Dir(real)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("checkpoint: open %s: directory %s does not exist (OpenFile does not create it)", path, filepath.Dir(real))
		}
		return nil, fmt.Errorf("checkpoint: open %s: %w", path, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("checkpoint: open %s: %s is not a directory", path, filepath.Dir(real))
	}
	lock, err := lockFile(real + ".lock")
	if err != nil {
		return nil, err
	}
	f := &File{
		path: real, tmp: real + ".tmp", perm: DefaultFileMode, lock: lock,
		writing: make(chan struct{}, 1),
		pos:     make(map[pair]kept),
	}
	if err := f.open(); err != nil {
		return nil, errors.Join(err, unlockFile(lock))
	}
	return f, nil
}

// resolve returns path made absolute, so that a later change of the
// working directory moves neither the file nor its lock, with the links
// of its directory resolved, and the link it is, if it is one, followed to
// the file it names, even one not created yet. Nothing is cleaned as text
// before the system resolves it: "link/../f" is f beside the link's
// target, not beside the link.
func resolve(path string) (string, error) {
	p := path
	if !filepath.IsAbs(p) {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("checkpoint: open %s: %w", path, err)
		}
		p = wd + string(filepath.Separator) + p
	}
	for hops := 0; ; hops++ {
		dir, base := splitLast(p)
		if base == "" || base == "." || base == ".." {
			// Refused before a lock file is made beside it.
			return "", fmt.Errorf("checkpoint: open %s: the path names a directory, not a file", path)
		}
		real, err := filepath.EvalSymlinks(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return p, nil // a missing directory: OpenFile says so
		} else if err != nil {
			return "", fmt.Errorf("checkpoint: open %s: %w", path, err)
		}
		p = filepath.Join(real, base)
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return p, nil // not a link: a missing file, or an error that open reports
		}
		if hops == 255 {
			return "", fmt.Errorf("checkpoint: open %s: too many symbolic links", path)
		}
		target, err := os.Readlink(p)
		if err != nil {
			return "", fmt.Errorf("checkpoint: open %s: %w", path, err)
		}
		if !filepath.IsAbs(target) {
			target = real + string(filepath.Separator) + target
		}
		p = target
	}
}

// splitLast splits p after its last separator, without cleaning it.
func splitLast(p string) (dir, base string) {
	i := strings.LastIndexByte(p, filepath.Separator)
	return p[:i+1], p[i+1:]
}

// open removes a temporary file left by a crash, then reads the file, or
// creates it when there is none.
func (f *File) open() error {
	if err := os.Remove(f.tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checkpoint: open %s: remove the temporary file of an unfinished save: %w", f.path, err)
	}
	file, err := os.Open(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		// Create it now, so that a directory the process cannot write to
		// fails the start of the run, not its first checkpoint.
		if err := f.write(f.encode()); err != nil {
			return err
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint: open %s: %w", f.path, err)
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return fmt.Errorf("checkpoint: open %s: %w", f.path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("checkpoint: open %s: not a regular file", f.path)
	}
	f.perm = fi.Mode().Perm()
	data, err := io.ReadAll(file)
	if err != nil {
		return fmt.Errorf("checkpoint: open %s: %w", f.path, err)
	}
	if err := f.decode(data); err != nil {
		return fmt.Errorf("checkpoint: %s is not a checkpoint file that this version of Sluice reads: %w; "+
			"it was left as it is (move it aside to start every source from its beginning)", f.path, err)
	}
	return nil
}

func (f *File) decode(data []byte) error {
	if len(data) == 0 {
		return errors.New("it is empty, and a checkpoint file never is")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c fileContent
	if err := dec.Decode(&c); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("something follows its JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("something follows its JSON object")
	}
	if c.Format != fileFormat {
		return fmt.Errorf("its format is %q, not %q", c.Format, fileFormat)
	}
	if c.Version != fileVersion {
		return fmt.Errorf("its version is %d (this version of Sluice reads %d)", c.Version, fileVersion)
	}
	if c.Positions == nil {
		// A saved file always has the list, empty or not: a file without
		// it was edited, and opening it as empty would start every
		// source over.
		return errors.New("it has no list of positions")
	}
	for i, e := range c.Positions {
		if e.Position == nil {
			return fmt.Errorf("position %d (pipeline %q, source %q) has no position", i+1, e.Pipeline, e.Source)
		}
		k := pair{e.Pipeline, e.Source}
		if _, dup := f.pos[k]; dup {
			return fmt.Errorf("position %d: pipeline %q, source %q is there twice", i+1, e.Pipeline, e.Source)
		}
		f.pos[k] = kept{pos: e.Position}
	}
	return nil
}

// encode returns the file's content for the positions in f.pos, one
// position a line; f.mu is held, or f is not shared yet. It writes the
// JSON itself, so that a large position costs one base64 encoding and no
// more.
func (f *File) encode() []byte {
	keys := make([]pair, 0, len(f.pos))
	size := 64
	for k, p := range f.pos {
		keys = append(keys, k)
		size += 64 + len(k.pipeline) + len(k.source) + base64.StdEncoding.EncodedLen(len(p.pos))
	}
	slices.SortFunc(keys, func(a, b pair) int {
		return cmp.Or(strings.Compare(a.pipeline, b.pipeline), strings.Compare(a.source, b.source))
	})
	b := make([]byte, 0, size)
	b = fmt.Appendf(b, "{\"format\":%q,\"version\":%d,\"positions\":[", fileFormat, fileVersion)
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "\n{\"pipeline\":"...)
		b = appendString(b, k.pipeline)
		b = append(b, ",\"source\":"...)
		b = appendString(b, k.source)
		b = append(b, ",\"position\":\""...)
		b = base64.StdEncoding.AppendEncode(b, f.pos[k].pos)
		b = append(b, "\"}"...)
	}
	return append(b, "\n]}\n"...)
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic("checkpoint: encoding a name: " + err.Error()) // a string always encodes
	}
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}

// write replaces the file with data: a temporary file, synced, renamed
// over the file, and the directory synced.
func (f *File) write(data []byte) (err error) {
	tmp, err := os.OpenFile(f.tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, f.perm)
	if err != nil {
		return fmt.Errorf("checkpoint: save %s: %w", f.path, err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(f.tmp)
			err = fmt.Errorf("checkpoint: save %s: %w", f.path, err)
		}
	}()
	// The mode of the file it replaces, which the umask may have narrowed.
	if err := tmp.Chmod(f.perm); err != nil {
		return errors.Join(err, tmp.Close())
	}
	if _, err := tmp.Write(data); err != nil {
		return errors.Join(err, tmp.Close())
	}
	if err := tmp.Sync(); err != nil {
		return errors.Join(err, tmp.Close())
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.tmp, f.path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(f.path))
}

// Load implements [Store.Load]. It reads no file: OpenFile read it.
func (f *File) Load(ctx context.Context, pipeline, source string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, f.closedError("load")
	}
	p, ok := f.pos[pair{pipeline, source}]
	if !ok {
		return nil, nil
	}
	return clone(p.pos), nil
}

// Save implements [Store.Save]. It returns once the file on the disk holds
// pos, or an error. Names that are not UTF-8 or hold a NUL byte are
// refused.
func (f *File) Save(ctx context.Context, pipeline, source string, pos []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkNames(pipeline, source); err != nil {
		return err
	}
	k := pair{pipeline, source}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return f.closedError("save")
	}
	cur, ok := f.pos[k]
	if !ok || !bytes.Equal(cur.pos, pos) {
		f.version++
		cur = kept{pos: clone(pos), version: f.version}
		f.pos[k] = cur
	}
	need := cur.version // the file holds pos once it holds this version
	done := f.written >= need
	f.mu.Unlock()
	if done {
		return nil // the file holds pos already
	}

	select {
	case f.writing <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-f.writing }()
	f.mu.Lock()
	if f.written >= need {
		f.mu.Unlock()
		return nil // a Save that wrote meanwhile carried pos
	}
	if f.closed {
		f.mu.Unlock()
		return f.closedError("save")
	}
	v, data := f.version, f.encode()
	f.mu.Unlock()
	if err := f.write(data); err != nil {
		return err
	}
	f.mu.Lock()
	f.written = max(f.written, v)
	f.mu.Unlock()
	return nil
}

// Close releases the file's lock, after the save under way if any. Load
// and Save then fail with an error that wraps [fs.ErrClosed]; Close again
// does nothing.
func (f *File) Close() error {
	f.writing <- struct{}{}
	defer func() { <-f.writing }()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	if err := unlockFile(f.lock); err != nil {
		return fmt.Errorf("checkpoint: close %s: %w", f.path, err)
	}
	return nil
}

func (f *File) closedError(op string) error {
	return fmt.Errorf("checkpoint: %s %s: %w", op, f.path, fs.ErrClosed)
}

// checkNames refuses the names a file could not keep as they are.
func checkNames(pipeline, source string) error {
	for _, n := range [...]struct{ what, name string }{{"pipeline", pipeline}, {"source", source}} {
		if !utf8.ValidString(n.name) {
			return fmt.Errorf("checkpoint: the %s name %q is not UTF-8 text", n.what, n.name)
		}
		if strings.IndexByte(n.name, 0) >= 0 {
			return fmt.Errorf("checkpoint: the %s name %q holds a NUL byte", n.what, n.name)
		}
	}
	return nil
}

var _ Store = (*File)(nil)

// Path returns the path of the file that f replaces on each save:
// OpenFile's path, absolute, its symbolic links resolved.
func (f *File) Path() string { return f.path }
