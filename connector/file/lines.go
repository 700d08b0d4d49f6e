package file

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// A lineReader reads the lines of an input, of any length, and keeps the
// position after each.
type lineReader struct {
	path string
	r    *bufio.Reader
	at   position // after the last line read
	buf  []byte   // the line being assembled when it spans buffers
}

// next returns the next line with its end ("\n" or "\r\n") cut off, valid
// until the next call, and the line's number; io.EOF at the end.
func (l *lineReader) next() (line []byte, num int64, err error) {
	line, err = l.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		// A line longer than the buffer: gather its pieces.
		l.buf = append(l.buf[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = l.r.ReadSlice('\n')
			l.buf = append(l.buf, line...)
		}
		line = l.buf
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, readError(l.path, err)
	}
	if len(line) == 0 {
		return nil, 0, io.EOF
	}
	l.at.off += int64(len(line))
	l.at.line++
	l.at.end = endNewline
	if line[len(line)-1] != '\n' {
		l.at.end = endNone // the file's last line, without its end
	}
	line = bytes.TrimSuffix(line, []byte{'\n'})
	line = bytes.TrimSuffix(line, []byte{'\r'})
	return line, l.at.line, nil
}

// linesFormat makes each line an item (Lines).
type linesFormat struct{}

func (linesFormat) counter() counter   { return countLines }
func (linesFormat) headerLines() int64 { return 0 }

func (linesFormat) rows(s *Source[string], in *input) (rowReader[string], error) {
	return &lineRows{lineReader{path: s.path, r: in.r, at: in.at}}, nil
}

type lineRows struct{ lineReader }

func (l *lineRows) next() (row[string], error) {
	line, _, err := l.lineReader.next()
	if err != nil {
		return row[string]{}, err
	}
	return row[string]{item: string(line), end: l.at}, nil
}

// jsonlFormat decodes each line that is not blank into a T (JSONL).
type jsonlFormat[T any] struct{}

func (jsonlFormat[T]) counter() counter   { return countNonBlank }
func (jsonlFormat[T]) headerLines() int64 { return 0 }

func (jsonlFormat[T]) rows(s *Source[T], in *input) (rowReader[T], error) {
	return &jsonRows[T]{lineReader{path: s.path, r: in.r, at: in.at}}, nil
}

type jsonRows[T any] struct{ lineReader }

func (j *jsonRows[T]) next() (row[T], error) {
	for {
		line, num, err := j.lineReader.next()
		if err != nil {
			return row[T]{}, err
		}
		if len(bytes.TrimLeft(line, " \t\r")) == 0 {
			continue // a blank line holds no item
		}
		var v T
		if err := json.Unmarshal(line, &v); err != nil {
			return row[T]{raw: bytes.Clone(line), end: j.at, bad: &RowError{
				Path: j.path, Line: num, Column: jsonColumn(err), Err: err}}, nil
		}
		return row[T]{item: v, end: j.at}, nil
	}
}

// jsonColumn returns the 1-based column at which encoding/json found err:
// the byte it choked on, or the last byte of a value of the wrong type.
func jsonColumn(err error) int {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return int(max(se.Offset, 1))
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return int(max(te.Offset, 1))
	}
	return 0
}
