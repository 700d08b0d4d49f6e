package file

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/node"
)

// A Source reads a file and emits its items with their positions: see
// [Lines], [CSV] and [JSONL]. It implements node.Source, node.Opener,
// node.Closer, node.Resumable, node.Sized and
// deadletter.DeadLetterWriter. Run, Open, Close and Resume are called one
// at a time, as the pipeline does; Size and BadRows may be called from any
// goroutine.
type Source[T any] struct {
	path   string
	format format[T]

	at      position // where the next row starts
	in      *input   // the open file, nil when closed
	counted bool     // the size of this run was counted
	// tail holds the bad rows dead-lettered since the last item emitted
	// (the last line without its end among them): a later Run that finds
	// one as it was does not dead-letter it again. A Resume to another
	// position than where the tail starts forgets it.
	tail *badTail

	letters broker.Letters
	size    atomic.Int64
	bad     atomic.Int64
}

// A format is how a source turns its file into items.
type format[T any] interface {
	// rows returns the reader of the items of in, from its position.
	rows(s *Source[T], in *input) (rowReader[T], error)
	// counter says which lines make an item, for Size.
	counter() counter
	// headerLines is the number of lines at the file's start that make
	// no item, though the counter counts them: a CSV header.
	headerLines() int64
}

// A rowReader reads items; io.EOF at the end.
type rowReader[T any] interface {
	next() (row[T], error)
}

// A row is an item read, with the position after it, or a bad row.
type row[T any] struct {
	item T
	end  position
	raw  []byte    // the bad row's bytes, without its line end
	bad  *RowError // nil for an item
}

func newSource[T any](path string, f format[T]) *Source[T] {
	s := &Source[T]{path: path, format: f}
	s.size.Store(-1)
	return s
}

// Path returns the path of the source's file.
func (s *Source[T]) Path() string { return s.path }

// Resume makes the next run start after pos, a position the source gave
// with an item (nil: at the start of the file). It checks the position's
// bytes; Open checks that it fits the file.
func (s *Source[T]) Resume(pos []byte) error {
	p, err := decodePosition(pos)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrPosition, s.path, err)
	}
	s.closeInput()
	s.at, s.counted = p, false
	// A run resumed elsewhere reads again every row after its position,
	// bad rows included; one resumed where the bad rows after the last
	// item start (a pipeline's next run, from the position of that item)
	// finds them as this source left them.
	if s.tail != nil && s.tail.from != p {
		s.tail = nil
	}
	s.size.Store(-1)
	return nil
}

// Open opens the file, moves to the position the run starts at (see
// Resume; after a Run, where it stopped), and, at the first Open after
// Resume, counts the items for Size. Errors name the file. Opening a named
// pipe waits for a writer, until ctx ends. Run opens the file itself when
// Open was not called.
func (s *Source[T]) Open(ctx context.Context) error {
	s.closeInput()
	if s.at.line > 0 && s.format.headerLines() > 0 {
		// Before the pipe is opened and read up to the position, which
		// would wait for its writer and take what it wrote.
		if fi, err := os.Stat(s.path); err == nil && !fi.Mode().IsRegular() {
			return headerResumeError(s.path)
		}
	}
	in, err := openInput(ctx, s.path, s.at)
	if err != nil {
		return err
	}
	if !s.counted {
		n, err := s.format.counter().count(ctx, in)
		if err != nil {
			in.close()
			return err
		}
		if n > 0 && in.at.line == 0 {
			n -= s.format.headerLines()
		}
		s.size.Store(n)
		s.counted = true
	}
	s.in = in
	return nil
}

// Run emits the items of the file from the source's position with their
// positions, and dead-letters the bad rows (see the package
// documentation). It returns nil at the end of the file, and closes it. A
// Run after one that returned goes on after the last item emitted.
func (s *Source[T]) Run(ctx context.Context, out node.Emitter[T]) error {
	if s.in == nil {
		if err := s.Open(ctx); err != nil {
			return err
		}
	}
	defer s.closeInput()
	defer s.in.watch(ctx)()
	rows, err := s.format.rows(s, s.in)
	if err != nil {
		return stopped(ctx, err)
	}
	var positions positionBlock
	for n := 0; ; n++ {
		if n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		r, err := rows.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return stopped(ctx, err)
		}
		if r.bad != nil {
			half := r.end.end == endNone || r.end.end == endOpen
			// A bad row dead-lettered since the last item, found as it
			// was (the last line with its end or not), is not
			// dead-lettered again.
			if s.tail == nil {
				s.tail = &badTail{from: s.at}
			}
			if !s.tail.seen(s.at, r.raw, half) {
				if err := s.deadLetter(ctx, r); err != nil {
					return err
				}
				s.tail.add(s.at, r.raw, half)
			}
			if half {
				// The file's last line, without its end, did not
				// decode: a writer may be in the middle of it. The
				// next Run reads it again, whole by then, and
				// dead-letters it again only if it changed. This one
				// ends here: reading on, past the end it saw, would
				// take the rest of the line, written since, for a row
				// of its own.
				return nil
			}
		} else {
			if err := out.EmitAt(ctx, r.item, positions.encode(r.end)); err != nil {
				return err
			}
			s.tail = nil // the bad rows before it are behind a position
		}
		s.at = r.end
	}
}

// A badTail is the bad rows a source dead-lettered after the last item it
// emitted: where they start (the position after that item), and each row
// by where it starts and the SHA-256 of its bytes, at most maxTail, and
// beside them the last line without its end, which is always kept: a Run
// ends before it, so every later Run reads it again.
type badTail struct {
	from position
	rows map[badRow]struct{}
	half *badRow
}

type badRow struct {
	at  position
	sum [sha256.Size]byte
}

// maxTail is how many bad rows after the last item, not counting the
// last line without its end (nor one that was, found again with its end),
// a source remembers; those past it are dead-lettered again by a Run
// resumed before them.
const maxTail = 4096

// seen reports whether the row was dead-lettered already. The last line
// without its end found again with its end (half false) moves to the
// other rows, past their cap too, so that a new last line does not make
// the source forget it.
func (t *badTail) seen(at position, raw []byte, half bool) bool {
	r := badRow{at, sha256.Sum256(raw)}
	if t.half != nil && *t.half == r {
		if !half {
			t.half = nil
			if t.rows == nil {
				t.rows = map[badRow]struct{}{}
			}
			t.rows[r] = struct{}{}
		}
		return true
	}
	_, ok := t.rows[r]
	return ok
}

// add remembers a bad row dead-lettered; half says it is the last line,
// without its end, which replaces the one remembered before.
func (t *badTail) add(at position, raw []byte, half bool) {
	r := badRow{at, sha256.Sum256(raw)}
	if half {
		t.half = &r
		return
	}
	if t.rows == nil {
		t.rows = map[badRow]struct{}{}
	}
	if len(t.rows) < maxTail {
		t.rows[r] = struct{}{}
	}
}

// deadLetter writes bad row r to the pipeline's dead-letter sink, or
// returns why it cannot.
func (s *Source[T]) deadLetter(ctx context.Context, r row[T]) error {
	// The row as it stands in the file: a string, which the dead-letter
	// file shows as text, when it is UTF-8; its bytes otherwise, as JSON
	// strings hold only UTF-8 text.
	var item any = r.raw
	if utf8.Valid(r.raw) {
		item = string(r.raw)
	}
	// The engine gives a DeadLetterWriter no clock: the time is the
	// wall clock's.
	sink, env := s.letters.Letter(item, deadletter.TypeOf(item), r.bad, "", time.Now())
	if sink == nil {
		return fmt.Errorf("%w (the pipeline has no dead-letter sink to take the row)", r.bad)
	}
	env.FirstFailure = env.LastFailure
	env.Source, env.Position = env.OriginNode, r.end.encode()
	if err := sink.Write(ctx, env); err != nil {
		return fmt.Errorf("file: %s:%d: dead-letter the bad row: %w", s.path, r.bad.Line, err)
	}
	s.bad.Add(1)
	return nil
}

// Close closes the file if it is open.
func (s *Source[T]) Close(context.Context) error {
	return s.closeInput()
}

func (s *Source[T]) closeInput() error {
	if s.in == nil {
		return nil
	}
	err := s.in.close()
	s.in = nil
	return err
}

// Size returns the number of items the run reads, counted at Open (see
// the package documentation), or -1 when it is unknown: before Open, for
// a gzip file, and for one that is not regular (a named pipe).
func (s *Source[T]) Size() int64 { return s.size.Load() }

// BadRows returns how many bad rows the source dead-lettered.
func (s *Source[T]) BadRows() int64 { return s.bad.Load() }

// UseDeadLetter is how the pipeline gives the source its dead-letter sink
// (nil for none) and what it knows of the envelope, for bad rows
// (deadletter.DeadLetterWriter).
func (s *Source[T]) UseDeadLetter(sink deadletter.Sink, base deadletter.Envelope) {
	s.letters.Use(sink, base)
}
