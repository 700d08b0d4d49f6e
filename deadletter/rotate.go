package deadletter

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// rotateLocked renames the full file to the next rotated name and starts
// an empty one. Lines waiting for a group commit are synced first, so that
// a rotated file is complete on disk before it gets its final name.
func (f *File) rotateLocked() error {
	if err := f.commitLocked(); err != nil {
		return err
	}
	old := f.f
	f.f = nil
	if err := old.Close(); err != nil {
		return fmt.Errorf("deadletter: rotate: %w", err)
	}
	next := rotatedName(f.path, f.seq+1)
	// Rename replaces an existing file silently: refuse, rather than lose
	// the dead letters of a file someone put there.
	if _, err := os.Lstat(next); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("deadletter: rotate %s: %s exists already", f.path, next)
	}
	if err := os.Rename(f.path, next); err != nil {
		return fmt.Errorf("deadletter: rotate: %w", err)
	}
	f.seq++
	nf, size, err := openLive(f.path, f.cfg.perm)
	if err != nil {
		return err
	}
	f.f, f.size = nf, size
	f.stats.Rotations++
	f.stats.Size = size
	return nil
}

// rotatedName is PATH.000001 for seq 1. Six digits sort by name, in ls
// and in globs, up to 999999 rotations; [Rotated] sorts by number, so
// later names with more digits still come in order.
func rotatedName(path string, seq int) string {
	return fmt.Sprintf("%s.%06d", path, seq)
}

// Rotated returns the files that rotation of the dead-letter file at path
// produced, oldest first: PATH.000001, PATH.000002, and so on. It does not
// include path itself, which holds the newest envelopes. A missing
// directory or no rotated files is no error: the result is empty. Only
// names rotation makes count (six digits at least, no other zeros in
// front), and not a file that is not regular: a sibling such as
// PATH.2024 or PATH.1, another sink's file or a backup, or a named pipe
// that would block the read, is not taken for one. A name that cannot be
// looked at (a dangling link) is listed, so that reading it says why.
func Rotated(path string) ([]string, error) {
	type rotated struct {
		name string
		seq  int
	}
	dir, base := filepath.Split(path)
	entries, err := os.ReadDir(dirOrDot(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("deadletter: %w", err)
	}
	var found []rotated
	for _, e := range entries {
		suffix, ok := strings.CutPrefix(e.Name(), base+".")
		if !ok || e.IsDir() || suffix == "" || strings.Trim(suffix, "0123456789") != "" {
			continue
		}
		seq, err := strconv.Atoi(suffix)
		if err != nil || seq == 0 || fmt.Sprintf("%06d", seq) != suffix {
			continue
		}
		if info, err := os.Stat(filepath.Join(dir, e.Name())); err == nil && !info.Mode().IsRegular() {
			// One that cannot be looked at is kept: reading it says why.
			continue
		}
		found = append(found, rotated{name: filepath.Join(dir, e.Name()), seq: seq})
	}
	slices.SortFunc(found, func(a, b rotated) int { return a.seq - b.seq })
	names := make([]string, len(found))
	for i, r := range found {
		names[i] = r.name
	}
	return names, nil
}

// lastRotation returns the suffix of the newest rotated file of path, 0
// when there is none, so that rotation after a restart goes on numbering.
func lastRotation(path string) (int, error) {
	names, err := Rotated(path)
	if err != nil || len(names) == 0 {
		return 0, err
	}
	last := names[len(names)-1]
	return strconv.Atoi(last[strings.LastIndexByte(last, '.')+1:])
}

// syncDir fsyncs the directory that holds path, so that a file created or
// renamed there keeps its name after a crash.
func syncDir(path string) error {
	if runtime.GOOS == "windows" {
		return nil // directories cannot be opened for syncing there
	}
	d, err := os.Open(dirOrDot(filepath.Dir(path)))
	if err != nil {
		return fmt.Errorf("deadletter: sync directory: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("deadletter: sync directory: %w", err)
	}
	return nil
}

func dirOrDot(dir string) string {
	if dir == "" {
		return "."
	}
	return dir
}
