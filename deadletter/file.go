package deadletter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
)

// ErrClosed is returned by [File.Write] after [File.Close].
var ErrClosed = errors.New("deadletter: file sink closed")

// A File is the durable dead-letter sink: a file of JSON lines, one
// [Envelope] per line, appended to and synced to disk before [File.Write]
// returns. It is safe for concurrent use by many writers in one process;
// two File values, or two processes, must not write the same path.
//
// Every Write fsyncs by default; [WithGroupCommit] lets concurrent writers
// share fsyncs. [WithMaxBytes] rotates the file by size. Read a file back
// with [ReadFile] or [ReadAll].
//
// A File writes at most one envelope for each item dead-lettered at a
// source position: see [OpenFile].
//
// Once an fsync or a rotation fails, the File refuses every later Write
// with that error: after a failed fsync the kernel may have dropped the
// data, and writing on would hide the loss. The engine then fails the run.
type File struct {
	path string
	cfg  fileConfig

	mu     sync.Mutex
	f      *os.File // nil once closed, or after a failed rotation
	size   int64    // bytes in f, all of them whole lines
	seq    int      // suffix of the newest rotated file
	batch  *batch   // lines written but not yet synced (group commit)
	err    error    // sticky failure
	closed bool
	// closing is closed once the first Close has ended.
	closing chan struct{}
	stats   FileStats
	// held has the key of every envelope with a position that the file
	// and its rotated files hold, those written since OpenFile included.
	held map[heldKey]struct{}

	// Group commit only: kick tells the committer that a batch is open,
	// stop asks it to exit, done closes when it has.
	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// FileStats counts what a [File] did since [OpenFile].
type FileStats struct {
	Writes    int64 // envelopes written
	Syncs     int64 // fsyncs of the file
	Rotations int64 // files rotated away
	Size      int64 // bytes in the current file
	// Duplicates counts the envelopes Write did not write because the
	// files held one with the same key already (see OpenFile).
	Duplicates int64
}

// A batch is the writers waiting for one group commit.
type batch struct {
	done chan struct{}        // closed after the sync
	err  error                // set before done is closed
	keys map[heldKey]struct{} // of the batch's lines that have one
}

// OpenFile opens the dead-letter file at path for appending, creating it
// if needed. If the file ends in a torn line, left by a crash in the
// middle of a write, OpenFile first ends that line, so that the reader
// reports it as one corrupt line and every new envelope stays whole.
//
// OpenFile then reads every envelope that [ReadAll] reads, the files
// rotated from path and path itself, and keeps a key for each that has a
// [Envelope.Position]: a hash of its Pipeline, Source, Position,
// OriginNode and encoded item (ItemType, Item, and ItemError and ItemText
// for an item that could not be encoded), its strings as the file holds
// them (a byte that is not valid UTF-8 as U+FFFD). [File.Write] writes no
// second envelope with a key the files hold, so that the items a resumed run
// replays after its last checkpoint, dead-lettered before the crash, are
// not dead-lettered twice. An envelope without a position is always
// written. A torn or corrupt line holds no key. The File keeps 16 bytes
// of hash per envelope with a position, not the lines; a file that
// cannot be read fails OpenFile.
//
// The caller must call [File.Close], which syncs what is pending and,
// under group commit, stops the File's goroutine.
func OpenFile(path string, opts ...FileOption) (*File, error) {
	cfg := defaultFileConfig()
	for _, opt := range opts {
		opt(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("deadletter: open %s: %w", path, err)
	}
	seq, err := lastRotation(path)
	if err != nil {
		return nil, err
	}
	f, size, err := openLive(path, cfg.perm)
	if err != nil {
		return nil, err
	}
	held, err := loadHeld(path, f, size)
	if err != nil {
		return nil, errors.Join(err, f.Close())
	}
	file := &File{path: path, cfg: cfg, f: f, size: size, seq: seq, held: held}
	file.stats.Size = size
	if cfg.groupCommit > 0 {
		file.kick = make(chan struct{}, 1)
		file.stop = make(chan struct{})
		file.done = make(chan struct{})
		go file.commitLoop()
	}
	return file, nil
}

// openLive opens or creates the file that takes new lines, and returns its
// size after making sure it ends with a whole line.
func openLive(path string, perm os.FileMode) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_EXCL, perm)
	if err == nil {
		// The new name must survive a crash as well as the lines.
		if err := syncDir(path); err != nil {
			return nil, 0, errors.Join(err, f.Close())
		}
		return f, 0, nil
	}
	if !errors.Is(err, os.ErrExist) {
		return nil, 0, fmt.Errorf("deadletter: %w", err)
	}
	if f, err = os.OpenFile(path, os.O_RDWR|os.O_APPEND, perm); err != nil {
		return nil, 0, fmt.Errorf("deadletter: %w", err)
	}
	size, err := endLine(f)
	if err != nil {
		return nil, 0, errors.Join(fmt.Errorf("deadletter: %s: %w", path, err), f.Close())
	}
	return f, size, nil
}

// endLine appends a newline when the file's last byte is not one, and
// returns the file's size.
func endLine(f *os.File) (int64, error) {
	info, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := info.Size()
	if size == 0 {
		return 0, nil
	}
	last := make([]byte, 1)
	if _, err := f.ReadAt(last, size-1); err != nil {
		return 0, err
	}
	if last[0] == '\n' {
		return size, nil
	}
	if _, err := f.Write([]byte{'\n'}); err != nil {
		return 0, err
	}
	return size + 1, f.Sync()
}

// Write appends env as one line and returns once the line is synced to
// disk: at once under the default policy, at the next group commit under
// [WithGroupCommit]. An item the encoder cannot encode is written with
// [Envelope.ItemError] set rather than refused. Write returns an error,
// and writes nothing, when ctx is already done. If ctx ends while Write
// waits for a group commit, Write returns the context's cause, but the
// line is in the file and the next commit syncs it: a retry of the same
// envelope writes it twice, unless it has a position.
//
// An envelope with a [Envelope.Position] whose key the files hold already
// (see [OpenFile]) is not written again: Write returns nil once the line
// that holds it is synced, as if it had written it, and counts it in
// [FileStats].Duplicates. Of concurrent Writes of one key, one writes.
func (f *File) Write(ctx context.Context, env Envelope) error {
	if ctx.Err() != nil {
		return fmt.Errorf("deadletter: %s: write: %w", f.path, context.Cause(ctx))
	}
	line, key, keyed, err := encodeLine(env, f.cfg.encode)
	if err != nil {
		return fmt.Errorf("deadletter: %s: encode envelope: %w", f.path, err)
	}
	f.mu.Lock()
	b, err := f.appendLocked(line, key, keyed)
	f.mu.Unlock()
	if err != nil || b == nil {
		return err
	}
	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
		select {
		case <-b.done:
			return b.err
		default:
		}
		return fmt.Errorf("deadletter: %s: written, not yet synced: %w", f.path, context.Cause(ctx))
	}
}

// appendLocked writes line, unless keyed and the files hold key already.
// It returns the batch to wait for under group commit, nil when the line,
// or the line that holds key, is synced already.
func (f *File) appendLocked(line []byte, key heldKey, keyed bool) (*batch, error) {
	switch {
	case f.closed:
		return nil, fmt.Errorf("%w: %s", ErrClosed, f.path)
	case f.err != nil:
		return nil, f.err
	}
	if keyed {
		if _, ok := f.held[key]; ok {
			f.stats.Duplicates++
			// Lines outside the open batch are synced: only the open
			// batch can hold the key's line unsynced.
			if f.batch != nil {
				if _, pending := f.batch.keys[key]; pending {
					return f.batch, nil
				}
			}
			return nil, nil
		}
	}
	if f.cfg.maxBytes > 0 && f.size > 0 && f.size+int64(len(line)) > f.cfg.maxBytes {
		if err := f.rotateLocked(); err != nil {
			f.err = err
			return nil, err
		}
	}
	if _, err := f.f.Write(line); err != nil {
		// A short write left part of a line: cut it off, so that the next
		// line starts at the start of a line.
		if terr := f.f.Truncate(f.size); terr != nil {
			f.err = fmt.Errorf("deadletter: %s: a failed write left a partial line that could not be removed: %w", f.path, errors.Join(err, terr))
			return nil, f.err
		}
		return nil, fmt.Errorf("deadletter: %w", err)
	}
	f.size += int64(len(line))
	f.stats.Writes++
	f.stats.Size = f.size
	if keyed {
		// Held from now on: a sync that fails is sticky, so no later
		// Write can take the key for written when it is not.
		f.held[key] = struct{}{}
	}
	if f.cfg.groupCommit == 0 {
		if err := f.syncLocked(); err != nil {
			return nil, err
		}
		return nil, nil
	}
	if f.batch == nil {
		f.batch = &batch{done: make(chan struct{})}
		select {
		case f.kick <- struct{}{}:
		default: // the committer has a kick pending already
		}
	}
	if keyed {
		if f.batch.keys == nil {
			f.batch.keys = map[heldKey]struct{}{}
		}
		f.batch.keys[key] = struct{}{}
	}
	return f.batch, nil
}

// syncLocked fsyncs the file; a failure is sticky.
func (f *File) syncLocked() error {
	if err := f.f.Sync(); err != nil {
		f.err = fmt.Errorf("deadletter: %s: fsync failed, the file refuses further writes: %w", f.path, err)
		return f.err
	}
	f.stats.Syncs++
	return nil
}

// commitLocked syncs the lines of the open batch, if any, and releases its
// writers.
func (f *File) commitLocked() error {
	b := f.batch
	if b == nil {
		return nil
	}
	f.batch = nil
	b.err = f.syncLocked()
	close(b.done)
	return b.err
}

// commitLoop runs group commits: the first line of a batch starts a timer
// of the group-commit interval, and the sync runs when it fires. It exits
// when stop closes; Close then commits what is left.
func (f *File) commitLoop() {
	defer close(f.done)
	for {
		select {
		case <-f.kick:
		case <-f.stop:
			return
		}
		t := f.cfg.clock.NewTimer(f.cfg.groupCommit)
		select {
		case <-t.Chan():
		case <-f.stop:
			t.Stop()
			return
		}
		f.mu.Lock()
		_ = f.commitLocked() // the batch's writers get the error
		f.mu.Unlock()
	}
}

// Stats returns the File's counters.
func (f *File) Stats() FileStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// Path returns the path the File writes to.
func (f *File) Path() string { return f.path }

// Rotate moves the file's envelopes away now, to the next rotated name
// (see [Rotated]), as [WithMaxBytes] does when the file is full, and goes
// on in an empty file; an empty file is left as it is. A program that
// wants each run's dead letters in a file of their own calls it after
// [OpenFile]: the file then holds this run's, and [ReadAll] still reads
// every run's, oldest first. A failed rotation is sticky, as in Write.
func (f *File) Rotate() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.closed:
		return fmt.Errorf("%w: %s", ErrClosed, f.path)
	case f.err != nil:
		return f.err
	case f.size == 0:
		return nil
	}
	if err := f.rotateLocked(); err != nil {
		f.err = err
		return err
	}
	return nil
}

// Close syncs the lines still waiting for a group commit, releases their
// writers, stops the group-commit goroutine and closes the file. It
// returns the file's sticky failure, if a sync, write or rotation failed
// before (a line whose writer's context ended before its group commit
// may be in no synced file: Close says so). Writes after Close return
// [ErrClosed]; a second Close waits for the first to end and returns nil.
func (f *File) Close() error {
	f.mu.Lock()
	if f.closed {
		closing := f.closing
		f.mu.Unlock()
		<-closing
		return nil
	}
	f.closed = true
	f.closing = make(chan struct{})
	defer close(f.closing)
	f.mu.Unlock()
	if f.stop != nil {
		close(f.stop)
		<-f.done
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.commitLocked()
	if err == nil && f.err != nil {
		err = f.err
	}
	if f.f != nil {
		if cerr := f.f.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("deadletter: %w", cerr))
		}
		f.f = nil
	}
	return err
}
