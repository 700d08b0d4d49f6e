package file

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// CSVOptions configure [CSV]. The zero value reads records separated by
// commas, with no header, every record having as many fields as the
// first that parses, and quotes as RFC 4180 has them: encoding/csv's defaults.
type CSVOptions struct {
	// Header says the file's first record names the fields: it is not
	// emitted, and each [Record] looks its fields up by those names. A
	// resumed source reads it again before moving to its position.
	Header bool
	// Comma is the field separator; 0 means ','. It must be a valid rune
	// other than '"', '\r', '\n' and the Unicode replacement character.
	Comma rune
	// LazyQuotes lets a quote appear in an unquoted field and a
	// non-doubled quote in a quoted field (encoding/csv's LazyQuotes).
	LazyQuotes bool
	// FieldsPerRecord is the number of fields each record has: 0 (the
	// zero value) takes the first record's that parses (the header's,
	// with Header), a positive number is that number, and a negative one
	// lets records vary. A record with another number is a bad row.
	FieldsPerRecord int
	// TrimLeadingSpace ignores leading white space in a field.
	TrimLeadingSpace bool
}

// A Record is one CSV record.
type Record struct {
	// Line is the line of the file the record starts on, 1 for the first.
	Line int64 `json:"line"`
	// Fields are the record's fields, in order.
	Fields []string `json:"fields"`
	// Header holds the header's names when CSVOptions.Header is set, nil
	// otherwise. Every record of a run shares it: do not modify it.
	Header []string `json:"header,omitempty"`

	index map[string]int // name to field, shared; nil in a decoded Record
}

// Lookup returns the field that the header names name (the first, if
// several columns have that name), and whether the record has it.
func (r Record) Lookup(name string) (string, bool) {
	i, ok := r.index[name]
	if r.index == nil {
		// A Record decoded from JSON (a dead letter's, say) has no
		// index: look through the header.
		i, ok = -1, false
		for j, h := range r.Header {
			if h == name {
				i, ok = j, true
				break
			}
		}
	}
	if !ok || i >= len(r.Fields) {
		return "", false
	}
	return r.Fields[i], true
}

// Get returns the field that the header names name, or "" when the
// record has none.
func (r Record) Get(name string) string {
	v, _ := r.Lookup(name)
	return v
}

// csvFormat reads CSV records.
type csvFormat struct{ opts CSVOptions }

func (csvFormat) counter() counter { return countNonEmpty }

func (f csvFormat) headerLines() int64 {
	if f.opts.Header {
		return 1
	}
	return 0
}

// newReader returns a CSV reader of r with the options. When the options
// leave the number of fields to the first record, the reader lets records
// vary and csvRows checks them: encoding/csv would take the number from the
// first record it reads, also one that does not parse.
func (f csvFormat) newReader(r io.Reader) *csv.Reader {
	cr := csv.NewReader(r)
	if f.opts.Comma != 0 {
		cr.Comma = f.opts.Comma
	}
	cr.LazyQuotes = f.opts.LazyQuotes
	cr.TrimLeadingSpace = f.opts.TrimLeadingSpace
	cr.FieldsPerRecord = f.opts.FieldsPerRecord
	if cr.FieldsPerRecord == 0 {
		cr.FieldsPerRecord = -1
	}
	return cr
}

// newRows returns the reader of the records of in, from its position.
func (f csvFormat) newRows(path string, in *input) *csvRows {
	rec := &recorder{r: in.r, off: in.at.off}
	c := &csvRows{format: f, path: path, rec: rec, base: in.at, at: in.at, firstFixes: f.opts.FieldsPerRecord == 0}
	c.cr = f.newReader(bufio.NewReaderSize(rec, bufSize))
	return c
}

// headerResumeError is the error of a CSV source with a header resumed
// in a file that is not regular.
func headerResumeError(path string) error {
	return fmt.Errorf("%w: %s: a CSV source with a header resumes only in a regular file: the header of a pipe, read once, is behind the position", ErrPosition, path)
}

func (f csvFormat) rows(s *Source[Record], in *input) (rowReader[Record], error) {
	if c := f.opts.Comma; c != 0 && (c == '"' || c == '\r' || c == '\n' || !utf8.ValidRune(c) || c == utf8.RuneError) {
		return nil, fmt.Errorf("file: %s: CSVOptions.Comma %q is not a valid separator", s.path, c)
	}
	c := f.newRows(s.path, in)
	if !f.opts.Header {
		return c, nil
	}
	if in.at.line > 0 {
		// Resumed past the header: read it from the file's start.
		if !in.regular {
			return nil, headerResumeError(s.path)
		}
		h, err := f.readHeader(s)
		if err != nil {
			return nil, err
		}
		c.setHeader(h)
		return c, nil
	}
	// The header is the file's first record: a bad one fails the run,
	// as nothing after it could be named.
	r, err := c.read()
	switch {
	case errors.Is(err, io.EOF):
		return c, nil // an empty file: no header, no records
	case err != nil:
		return nil, err
	case r.bad != nil:
		return nil, fmt.Errorf("file: header: %w", r.bad)
	}
	c.setHeader(r.item.Fields)
	return c, nil
}

// readHeader reads the header of s's file: its first record.
func (f csvFormat) readHeader(s *Source[Record]) ([]string, error) {
	in, err := openInput(context.Background(), s.path, position{})
	if err != nil {
		return nil, err
	}
	defer in.close()
	c := f.newRows(s.path, in)
	r, err := c.read()
	switch {
	case errors.Is(err, io.EOF):
		return nil, fmt.Errorf("%w: %s: the file has no header", ErrPosition, s.path)
	case err != nil:
		return nil, err
	case r.bad != nil:
		return nil, fmt.Errorf("file: header: %w", r.bad)
	}
	return r.item.Fields, nil
}

// csvRows reads the records of a CSV input. The recorder keeps the bytes
// the CSV reader read, so that a bad row is dead-lettered as it stands in
// the file, and the lines of each record are counted.
type csvRows struct {
	format csvFormat
	path   string
	rec    *recorder
	cr     *csv.Reader
	base   position // where cr started
	at     position // after the last record read
	header []string
	index  map[string]int
	// firstFixes says the first record that parses fixes the number of
	// fields of the rest (CSVOptions.FieldsPerRecord 0); at.fields holds
	// it once it is known.
	firstFixes bool
}

func (c *csvRows) setHeader(h []string) {
	c.header, c.index = h, make(map[string]int, len(h))
	for i, name := range h {
		if _, dup := c.index[name]; !dup {
			c.index[name] = i
		}
	}
}

func (c *csvRows) next() (row[Record], error) {
	r, err := c.read()
	if err == nil && r.bad == nil {
		r.item.Header, r.item.index = c.header, c.index
	}
	return r, err
}

// read reads one record, good or bad.
func (c *csvRows) read() (row[Record], error) {
	fields, err := c.cr.Read()
	if err != nil && !isParseError(err) {
		if errors.Is(err, io.EOF) {
			return row[Record]{}, io.EOF
		}
		return row[Record]{}, readError(c.path, err)
	}
	end := c.base.off + c.cr.InputOffset()
	raw := c.rec.take(end)
	c.at.off = end
	c.at.line += int64(bytes.Count(raw, []byte{'\n'}))
	if len(raw) > 0 {
		c.at.end = endNewline
		if raw[len(raw)-1] != '\n' {
			c.at.line++ // the file's last line, without its end
			c.at.end = endNone
			if c.format.quoteOpen(skipBlankLines(raw)) {
				// A quote may be open (LazyQuotes, or a bad row): what a
				// writer appends may continue the field.
				c.at.end = endOpen
			}
		}
	}
	if err != nil {
		pe := err.(*csv.ParseError)
		e := pe.Err
		if errors.Is(e, csv.ErrFieldCount) {
			e = fieldCountError(len(fields), c.cr.FieldsPerRecord)
		}
		return row[Record]{raw: rowText(skipBlankLines(raw)), end: c.at, bad: &RowError{
			Path: c.path, Line: c.base.line + int64(pe.Line), Column: pe.Column, Err: e}}, nil
	}
	line, _ := c.cr.FieldPos(0)
	if c.firstFixes {
		switch want := c.at.fields; {
		case want == 0:
			c.at.fields = int64(len(fields))
		case int64(len(fields)) != want:
			// As encoding/csv reports it: at the record's first line.
			return row[Record]{raw: rowText(skipBlankLines(raw)), end: c.at, bad: &RowError{
				Path: c.path, Line: c.base.line + int64(line), Column: 1, Err: fieldCountError(len(fields), int(want))}}, nil
		}
	}
	return row[Record]{item: Record{Line: c.base.line + int64(line), Fields: fields}, end: c.at}, nil
}

// isParseError reports whether err is a *csv.ParseError: a bad row, not
// a failed read. (It is one, not one wrapped: csv.Reader returns it so.)
func isParseError(err error) bool {
	_, ok := err.(*csv.ParseError)
	return ok
}

func fieldCountError(got, want int) error {
	return fmt.Errorf("%w: %d fields, want %d", csv.ErrFieldCount, got, want)
}

// quoteOpen reports whether CSV record raw, the file's last, without its
// line end, ends inside a quoted field, so that what a writer appends, a
// "\n" too, continues the field. Without LazyQuotes a quote in a quoted
// field is doubled, so an odd number of quotes leaves one open (or the
// record is a bad row, whose position is not kept). Under LazyQuotes an
// even number may leave one open too (`"a"b` is the open field a"b), and
// encoding/csv itself decides: raw is read with a line end and one more
// line after it, and the field was open when the record ran past that
// line end.
func (f csvFormat) quoteOpen(raw []byte) bool {
	if !f.opts.LazyQuotes {
		return bytes.Count(raw, []byte{'"'})%2 == 1
	}
	if bytes.IndexByte(raw, '"') < 0 {
		return false
	}
	probe := make([]byte, 0, len(raw)+3)
	probe = append(append(probe, raw...), "\nx\n"...)
	cr := f.newReader(bytes.NewReader(probe))
	cr.FieldsPerRecord = -1
	_, _ = cr.Read()
	return cr.InputOffset() > int64(len(raw))+1
}

// skipBlankLines returns raw after the empty lines ("\n", "\r\n") it
// starts with: encoding/csv skips them before a record, so they are not
// the record's.
func skipBlankLines(raw []byte) []byte {
	for {
		switch {
		case bytes.HasPrefix(raw, []byte{'\n'}):
			raw = raw[1:]
		case bytes.HasPrefix(raw, []byte("\r\n")):
			raw = raw[2:]
		default:
			return raw
		}
	}
}

// rowText returns a copy of raw without the end of its last line.
func rowText(raw []byte) []byte {
	raw = bytes.TrimSuffix(raw, []byte{'\n'})
	return bytes.Clone(bytes.TrimSuffix(raw, []byte{'\r'}))
}

// A recorder keeps what is read through it, from the end of the last
// record taken on, so that the bytes of each record can be taken.
type recorder struct {
	r    io.Reader
	buf  []byte
	from int   // buf[from:] is not taken yet
	off  int64 // the input's offset at buf[from]
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if r.from > 0 && r.from >= len(r.buf)/2 {
		// Drop what was taken, in amortised constant time per byte.
		r.buf = r.buf[:copy(r.buf, r.buf[r.from:])]
		r.from = 0
	}
	r.buf = append(r.buf, p[:n]...)
	return n, err
}

// take returns the bytes from the end of the last take to end, an offset
// in the input: valid until the next Read.
func (r *recorder) take(end int64) []byte {
	n := int(end - r.off)
	b := r.buf[r.from : r.from+n]
	r.from += n
	r.off = end
	return b
}
