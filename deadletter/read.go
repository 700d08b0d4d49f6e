package deadletter

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"strings"
)

var (
	// ErrTornLine is matched by a [*LineError] for a last line that has no
	// newline and is not a whole envelope: a write cut short by a crash.
	// Its envelope's Write never returned, so its item was never reported
	// as dead-lettered.
	ErrTornLine = errors.New("deadletter: torn last line")
	// ErrCorruptLine is matched by a [*LineError] for a line that is not an
	// envelope: a torn line that a later OpenFile ended so it could append,
	// or a file damaged or edited by hand.
	ErrCorruptLine = errors.New("deadletter: corrupt line")
	// ErrUndecodableItem is matched by a [*LineError] from [Source] for an
	// envelope whose item cannot be decoded into the source's item type,
	// or was never encoded (see [Envelope.ItemError]).
	ErrUndecodableItem = errors.New("deadletter: item cannot be decoded")
)

// A LineError reports a line of a dead-letter file that could not be used.
// Kind is [ErrTornLine], [ErrCorruptLine] or [ErrUndecodableItem], and
// [errors.Is] matches it; Err says what was wrong, and [errors.As] and
// [errors.Unwrap] reach it.
type LineError struct {
	// Path is the file the line is in.
	Path   string
	Line   int   // 1-based
	Offset int64 // of the line's first byte in the file
	// Kind is the kind of problem: [ErrTornLine], [ErrCorruptLine] or
	// [ErrUndecodableItem].
	Kind error
	// Err says what was wrong with the line, such as the JSON decoder's
	// error.
	Err error
}

// Error names the file, the line and its byte offset, then the problem.
func (e *LineError) Error() string {
	kind := "bad line"
	if e.Kind != nil {
		kind = strings.TrimPrefix(e.Kind.Error(), "deadletter: ")
	}
	msg := fmt.Sprintf("deadletter: %s:%d (byte %d): %s", e.Path, e.Line, e.Offset, kind)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is reports whether target is the error's Kind.
func (e *LineError) Is(target error) bool { return target == e.Kind }

// Unwrap returns what was wrong with the line.
func (e *LineError) Unwrap() error { return e.Err }

// A Record is an envelope read from a file, with where it was read from and
// the line as it stands in the file, for tools that show or copy lines
// without changing them.
type Record struct {
	// Envelope is the envelope decoded from the line.
	Envelope
	// Path is the file the line was read from.
	Path   string
	Line   int    // 1-based
	Offset int64  // of the line's first byte in the file
	Raw    []byte // the line without its newline
}

// ReadFile returns the envelopes of the dead-letter file at path, in the
// order they were written. It reads that one file; [ReadAll] reads the
// files rotated away before it too.
//
// Each envelope's Item is a [encoding/json.RawMessage] of the encoded item
// ("null" when the item was nil or could not be encoded), and Err is an
// error whose text is ErrText: the error's type and identity do not survive
// a file. Times are in UTC.
//
// A line that cannot be read yields a [*LineError], and reading goes on
// with the next line: a torn last line ([ErrTornLine]) is skipped after
// everything before it, a corrupt line ([ErrCorruptLine]) anywhere is
// skipped and the lines after it are read. Blank lines are skipped
// silently. A file that cannot be opened or read yields one error and
// ends the sequence. Every range over the sequence reads the file anew; a
// file being written to may show its last line torn.
func ReadFile(path string) iter.Seq2[Envelope, error] {
	return envelopes(ReadRecords(path))
}

// ReadAll is [ReadFile] over the files rotation produced from path
// (see [Rotated]), oldest first, then path itself: every envelope the
// sink wrote, in order. A missing path is no error when rotated files
// exist. path is opened before the rotated files are listed, so that a
// rotation by a sink still writing cannot hide the letters path held when
// the read began (a file it rotates meanwhile is read once, last, and its
// Records keep path as their Path; files rotated after it, which hold
// only letters written since, are left to the next read).
func ReadAll(path string) iter.Seq2[Envelope, error] {
	return envelopes(readAllRecords(path))
}

// ReadRecords is [ReadFile] with the line number and raw bytes of every
// envelope.
func ReadRecords(path string) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		f, err := os.Open(path)
		if err != nil {
			yield(Record{}, fmt.Errorf("deadletter: %w", err))
			return
		}
		defer f.Close()
		readRecords(path, f, yield)
	}
}

// readAllOpened is called by ReadAll between the opening of its path and
// the listing of the rotated files: a test rotates there.
var readAllOpened = func() {}

func readAllRecords(path string) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		// path is opened before the rotated files are listed, and read
		// last through what was opened: a rotation meanwhile renames the
		// file held open, which the list then names too and which is
		// skipped there. Listed first, a rotation between the listing
		// and the opening would move path's letters to a file never
		// read.
		cur, openErr := os.Open(path)
		var curInfo os.FileInfo
		if openErr == nil {
			defer cur.Close()
			if curInfo, openErr = cur.Stat(); openErr != nil {
				curInfo = nil
			}
		}
		readAllOpened()
		paths, err := Rotated(path)
		if err != nil {
			yield(Record{}, err)
			return
		}
		if curInfo != nil {
			for i, p := range paths {
				if info, err := os.Stat(p); err == nil && os.SameFile(info, curInfo) {
					// path, rotated since it was opened, is read last;
					// the files rotated after it hold only letters
					// written since the read began, and are left.
					paths = paths[:i]
					break
				}
			}
		}
		for _, p := range paths {
			for r, err := range ReadRecords(p) {
				if !yield(r, err) {
					return
				}
			}
		}
		switch {
		case openErr == nil:
			readRecords(path, cur, yield)
		case !errors.Is(openErr, os.ErrNotExist) || len(paths) == 0:
			yield(Record{}, fmt.Errorf("deadletter: %w", openErr))
		}
	}
}

func envelopes(records iter.Seq2[Record, error]) iter.Seq2[Envelope, error] {
	return func(yield func(Envelope, error) bool) {
		for r, err := range records {
			if !yield(r.Envelope, err) {
				return
			}
		}
	}
}

// readRecords yields the envelopes of r, which is read from path.
func readRecords(path string, r io.Reader, yield func(Record, error) bool) {
	br := bufio.NewReaderSize(r, 64<<10)
	line, offset := 0, int64(0)
	for {
		b, err := br.ReadBytes('\n')
		if len(b) > 0 {
			line++
			start := offset
			offset += int64(len(b))
			complete := b[len(b)-1] == '\n'
			raw := bytes.TrimSuffix(b, []byte{'\n'})
			if len(bytes.TrimSpace(raw)) > 0 {
				env, derr := decodeLine(raw)
				var ok bool
				switch {
				case derr == nil:
					// A last line without its newline that is a whole
					// envelope lost only the newline: keep it.
					ok = yield(Record{Envelope: env, Path: path, Line: line, Offset: start, Raw: raw}, nil)
				case !complete:
					ok = yield(Record{}, &LineError{Path: path, Line: line, Offset: start, Kind: ErrTornLine,
						Err: fmt.Errorf("%d bytes without a newline at the end of the file", len(b))})
				default:
					ok = yield(Record{}, &LineError{Path: path, Line: line, Offset: start, Kind: ErrCorruptLine, Err: derr})
				}
				if !ok {
					return
				}
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			yield(Record{}, fmt.Errorf("deadletter: %s: read after line %d: %w", path, line, err))
			return
		}
	}
}
