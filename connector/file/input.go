package file

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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
}

// openInput opens the file at path and moves to p. A file that starts with
// the gzip magic bytes is decompressed, and reading moves forward to p's
// offset. Errors name the path.
func openInput(ctx context.Context, path string, p position) (_ *input, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("file: %w", err)
	}
	in := &input{f: f, at: p}
	defer func() {
		if err != nil {
			_ = in.close()
		}
	}()
	br := bufio.NewReaderSize(f, bufSize)
	magic, err := br.Peek(len(gzipMagic))
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("file: read %s: %w", path, err)
	}
	if bytes.Equal(magic, gzipMagic) {
		in.gzip = true
		if in.gz, err = gzip.NewReader(br); err != nil {
			return nil, fmt.Errorf("file: %s: gzip: %w", path, err)
		}
		in.r = bufio.NewReaderSize(in.gz, bufSize)
		// A gzip stream cannot seek: read forward to the byte before
		// the offset, which must end a line.
		if p.off > 0 {
			if _, err := discard(ctx, in.r, p.off-1); err != nil {
				return nil, positionError(path, p, err)
			}
		}
	} else {
		in.r = br
		if p.off > 0 {
			if _, err := f.Seek(p.off-1, io.SeekStart); err != nil {
				return nil, fmt.Errorf("file: seek %s: %w", path, err)
			}
			br.Reset(f)
		}
	}
	if p.off > 0 {
		if err := endsLine(in.r); err != nil {
			return nil, positionError(path, p, err)
		}
		return in, nil
	}
	if head, _ := in.r.Peek(len(bom)); bytes.Equal(head, bom) {
		_, _ = in.r.Discard(len(bom))
		in.at.off = int64(len(bom))
	}
	return in, nil
}

// errPastEnd and errMidLine say why a position does not fit.
var (
	errPastEnd = errors.New("past the end of the file")
	errMidLine = errors.New("not at the end of a line")
)

// endsLine reads the byte before the position, which must end a line, or
// be the file's last byte.
func endsLine(r *bufio.Reader) error {
	b, err := r.ReadByte()
	if errors.Is(err, io.EOF) {
		return errPastEnd
	}
	if err != nil {
		return err
	}
	if b == '\n' {
		return nil
	}
	if _, err := r.Peek(1); errors.Is(err, io.EOF) {
		return nil
	}
	return errMidLine
}

// positionError is the error of position p, which does not fit the file.
func positionError(path string, p position, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = errPastEnd
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if errors.Is(err, errPastEnd) || errors.Is(err, errMidLine) {
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
// decompressed. It reads the rest of the file (a plain one) with ReadAt, leaving the
// read offset alone.
func (c counter) count(ctx context.Context, in *input) (int64, error) {
	if in.gzip {
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
			return 0, fmt.Errorf("file: read %s: %w", in.f.Name(), err)
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
