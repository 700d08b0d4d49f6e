package file

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"time"
)

// bufSize is the read buffer of an input, and the chunk of the line count.
const bufSize = 64 << 10

// gzipMagic starts every gzip stream (RFC 1952).
var gzipMagic = []byte{0x1f, 0x8b}

// bom is the UTF-8 byte order mark, skipped at the start of a file.
var bom = []byte{0xEF, 0xBB, 0xBF}

// An input is a file opened at a position: r reads the (decompressed)
// bytes from there.
type input struct {
	f    *os.File
	gz   *gzip.Reader // nil for a plain file
	r    *bufio.Reader
	at   position // where r starts: after a BOM when the position was the start
	gzip bool
	// regular says f is a regular file, not a named pipe or a device
	// (/dev/stdin): one that can seek and be counted.
	regular bool
}

// openInput opens the file at path and moves to p. A file that starts with
// the gzip magic bytes is decompressed, and reading moves forward to p's
// offset. Errors name the path. For a pipe, ctx ends the waits for its
// writer.
func openInput(ctx context.Context, path string, p position) (_ *input, err error) {
	f, err := openFile(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("file: %w", err)
	}
	in := &input{f: f, at: p}
	if fi, err := f.Stat(); err == nil {
		in.regular = fi.Mode().IsRegular()
	}
	defer in.watch(ctx)()
	if err := in.move(ctx, path, p); err != nil {
		_ = in.close()
		return nil, stopped(ctx, err)
	}
	return in, nil
}

// move sets in's reader at position p of the file at path.
func (in *input) move(ctx context.Context, path string, p position) error {
	br := bufio.NewReaderSize(in.f, bufSize)
	// Byte by byte, so that a pipe whose writer wrote less than the magic
	// bytes, and waits, is read as soon as its first byte differs.
	if isGzip, err := startsWith(br, gzipMagic); err != nil {
		return readError(path, err)
	} else if isGzip {
		in.gzip = true
		if in.gz, err = gzip.NewReader(br); err != nil {
			return fmt.Errorf("file: %s: gzip: %w", path, err)
		}
		in.r = bufio.NewReaderSize(in.gz, bufSize)
		// A gzip stream cannot seek: read forward to the byte before
		// the offset, which must end a line.
		if p.off > 0 {
			if _, err := discard(ctx, in.r, p.off-1); err != nil {
				if errors.Is(err, io.ErrUnexpectedEOF) {
					err = errTruncated
				}
				return positionError(path, p, err)
			}
		}
	} else {
		in.r = br
		switch {
		case p.off == 0:
		case in.regular:
			if _, err := in.f.Seek(p.off-1, io.SeekStart); err != nil {
				return fmt.Errorf("file: seek %s: %w", path, err)
			}
			br.Reset(in.f)
		default:
			// A pipe cannot seek either.
			if _, err := discard(ctx, in.r, p.off-1); err != nil {
				return positionError(path, p, err)
			}
		}
	}
	if p.off > 0 {
		skip, err := afterLine(in.r, p.end)
		if err != nil {
			if in.gzip && errors.Is(err, io.ErrUnexpectedEOF) {
				err = errTruncated // cut just before the position's byte
			}
			return positionError(path, p, err)
		}
		// The end a writer gave the last line since is that line's, whose
		// item was emitted: the items go on after it.
		in.at.off += skip
		return nil
	}
	hasBOM, err := startsWith(in.r, bom)
	if err != nil {
		return readError(path, err)
	}
	if hasBOM {
		_, _ = in.r.Discard(len(bom))
		in.at.off = int64(len(bom))
	}
	return nil
}

// startsWith reports whether r's next bytes are prefix, reading no more of
// r than it needs to tell: an input shorter than prefix does not start
// with it.
func startsWith(r *bufio.Reader, prefix []byte) (bool, error) {
	for n := 1; n <= len(prefix); n++ {
		b, err := r.Peek(n)
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if b[n-1] != prefix[n-1] {
			return false, nil
		}
	}
	return true, nil
}

// watch makes ctx end a read of in that waits for a pipe's writer, until
// the function it returns is called, which leaves in's reads without a
// deadline. A regular file's reads do not wait.
func (in *input) watch(ctx context.Context) (stop func()) {
	if in.regular {
		return func() {}
	}
	f := in.f
	var (
		mu      sync.Mutex
		stopped bool
	)
	after := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			_ = f.SetReadDeadline(time.Unix(1, 0))
		}
	})
	return func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
		if !after() {
			_ = f.SetReadDeadline(time.Time{})
		}
	}
}

// stopped returns ctx's error for err when err is the end of a read that
// ctx ended (see watch).
func stopped(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return ctx.Err()
	}
	return err
}

// errPastEnd, errMidLine, errLineEnd and errContinued say why a position
// does not fit.
var (
	errPastEnd = errors.New("past the end of the file")
	errMidLine = errors.New("not at the end of a line")
	// errLineEnd is a position after a line that ended with "\n" where the
	// byte before it is no longer "\n", or after a last line without its
	// end where it now is.
	errLineEnd = errors.New("not after a line end as when it was given: the file changed")
	// errContinued is a position after a last line without its end that
	// the file now continues: a writer was in the middle of the line,
	// whose item was cut short.
	errContinued = errors.New("after a last line without its end, and the file now continues the last line")
	// errTruncated is a gzip stream that ends without its trailer before
	// the position.
	errTruncated = errors.New("past the end of the gzip stream, which is truncated")
)

// afterLine reads the byte before the position, which must end the line
// before it as end says: "\n", or, after the file's last line that had no
// end (endNone, or endUnknown with another byte), that line's last byte.
// Such a line may have been given its end since, by a writer that appends
// to the file: afterLine then reads that end too ("\n", "\r\n", or the
// "\n" after a line's last "\r", which a line at the end of the file
// drops; a "\r" alone at the end, as a "\r\n" half written) and returns
// how many bytes it read. Anything else after that line continues it.
func afterLine(r *bufio.Reader, end lineEnd) (skip int64, err error) {
	b, err := r.ReadByte()
	if errors.Is(err, io.EOF) {
		return 0, errPastEnd
	}
	if err != nil {
		return 0, err
	}
	switch {
	case b == '\n' && (end == endNone || end == endOpen):
		return 0, errLineEnd
	case b == '\n':
		return 0, nil
	case end == endNewline:
		if _, err := r.Peek(1); errors.Is(err, io.EOF) {
			return 0, errLineEnd
		}
		return 0, errMidLine
	}
	next, err := r.Peek(1)
	switch {
	case errors.Is(err, io.EOF):
		return 0, nil // still the file's last line
	case err != nil:
		return 0, err
	case end == endOpen:
		return 0, errContinued
	case next[0] == '\n':
		_, _ = r.Discard(1)
		return 1, nil
	case next[0] == '\r' && b != '\r':
		two, err := r.Peek(2)
		if errors.Is(err, io.EOF) {
			_, _ = r.Discard(1)
			return 1, nil
		}
		if err != nil {
			return 0, err
		}
		if two[1] == '\n' {
			_, _ = r.Discard(2)
			return 2, nil
		}
	}
	if end == endUnknown {
		return 0, errMidLine
	}
	return 0, errContinued
}

// positionError is the error of position p, which does not fit the file.
func positionError(path string, p position, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = errPastEnd
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if errors.Is(err, errPastEnd) || errors.Is(err, errMidLine) || errors.Is(err, errLineEnd) ||
		errors.Is(err, errContinued) || errors.Is(err, errTruncated) {
		return fmt.Errorf("%w: %s: %v is %v", ErrPosition, path, p, err)
	}
	return fmt.Errorf("file: %s: move to %v: %w", path, p, err)
}

// discard reads n bytes from r and drops them, checking ctx between
// chunks: a resume in a large gzip file reads everything before it.
func discard(ctx context.Context, r *bufio.Reader, n int64) (int64, error) {
	var done int64
	for done < n {
		if err := ctx.Err(); err != nil {
			return done, err
		}
		k, err := r.Discard(int(min(n-done, bufSize)))
		done += int64(k)
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

func (in *input) close() error {
	var errs []error
	if in.gz != nil {
		errs = append(errs, in.gz.Close())
	}
	errs = append(errs, in.f.Close())
	return errors.Join(errs...)
}

// A counter tells how many items the lines of a file make. Lines are
// separated by '\n'; the last one may lack it.
type counter int

const (
	countLines    counter = iota // every line, empty ones too (Lines)
	countNonEmpty                // lines with more than "\r" (encoding/csv skips the others)
	countNonBlank                // lines with more than spaces, tabs and "\r" (JSONL)
)

// count returns how many lines of in's file after its position c counts,
// or -1 for a gzip file, whose lines are known only once it is
// decompressed, and for a file that is not regular (a named pipe), which
// can be read only once. It reads the rest of the file (a regular one)
// with ReadAt, leaving the read offset alone.
func (c counter) count(ctx context.Context, in *input) (int64, error) {
	if in.gzip || !in.regular {
		return -1, nil
	}
	buf := make([]byte, 256<<10)
	var (
		n    int64
		off  = in.at.off
		line lineSeen
	)
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		k, err := in.f.ReadAt(buf, off)
		off += int64(k)
		chunk := buf[:k]
		for len(chunk) > 0 {
			i := bytes.IndexByte(chunk, '\n')
			if i < 0 {
				line.add(c, chunk)
				break
			}
			line.add(c, chunk[:i])
			if c.counts(line, true) {
				n++
			}
			chunk, line = chunk[i+1:], lineSeen{}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, readError(in.f.Name(), err)
		}
	}
	if c.counts(line, false) {
		n++
	}
	return n, nil
}

// lineSeen is what a count saw of a line so far.
type lineSeen struct {
	n        int64 // bytes
	first    byte
	nonBlank bool // a byte other than space, tab and "\r"
}

func (l *lineSeen) add(c counter, seg []byte) {
	if len(seg) == 0 {
		return
	}
	if l.n == 0 {
		l.first = seg[0]
	}
	l.n += int64(len(seg))
	if c == countNonBlank && !l.nonBlank {
		l.nonBlank = len(bytes.TrimLeft(seg, " \t\r")) > 0
	}
}

// counts reports whether line, ended by a newline (ended) or by the end
// of the file, makes an item. A line of only "\r" is empty: "\r\n" ends
// it.
func (c counter) counts(l lineSeen, ended bool) bool {
	switch c {
	case countLines:
		return ended || l.n > 0
	case countNonEmpty:
		return l.n > 1 || l.n == 1 && l.first != '\r'
	default:
		return l.nonBlank
	}
}

// readError is the error of a read of the file at path: an *fs.PathError
// names the path already.
func readError(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("file: %w", err)
	}
	return fmt.Errorf("file: read %s: %w", path, err)
}
