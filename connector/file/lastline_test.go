package file_test

// The edges a review found: a bad row's bytes, a last line that did not
// decode while a writer was in the middle of it, a LazyQuotes field left
// open by an even number of quotes, and a gzip file cut just before a
// position.

import (
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"testing"

	"github.com/sluicehq/sluice/connector/file"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// A bad CSV row's Item is the row as in the file: not the empty lines
// before it, which encoding/csv skips (LF and CRLF alike), whether the row
// does not parse or has the wrong number of fields.
func TestCSVBadRowItemIsTheRowWithoutTheBlankLinesBeforeIt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, content, want string }{
		{"field count", "a,b\n\n\nc\n", "c"},
		{"field count CRLF", "a,b\r\n\r\n\r\nc\r\n", "c"},
		{"parse error", "a,b\n\n1,\"x\"y\n2,z\n", "1,\"x\"y"},
		{"quoted line break", "a,b\n\n\"1\n2\",z,w\n", "\"1\n2\",z,w"},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := file.CSV(write(t, "in.csv", c.content, false), file.CSVOptions{})
			dlq := deadletterMemory(src)
			runFrom(t, src, nil)
			envs := dlq.Envelopes()
			require.Len(t, envs, 1)
			assert.Equal(t, c.want, envs[0].Item)
		})
	}
}

// A last JSONL line without its end that does not decode may be one a
// writer is still writing: the source dead-letters what it read, but its
// position stays before the line. Once the writer ends the line and
// appends more, the next Run (a node restart) emits the whole line and the
// rest, with the positions a run of the whole file gives; before, it
// failed with ErrPosition ("the file now continues the last line") on
// every Run after, and the rest was never read. A line that stays as it
// was is not dead-lettered again (TestBadLastLineIsDeadLetteredOncePerVersion).
func TestJSONLLastLineHalfWrittenIsReadAgainWhole(t *testing.T) {
	t.Parallel()
	type rec struct {
		ID int `json:"id"`
	}
	path := write(t, "in.jsonl", "{\"id\":1}\n{\"id\":", false)
	src := file.JSONL[rec](path)
	dlq := deadletterMemory(src)
	first := runFrom(t, src, nil)
	require.Equal(t, []rec{{1}}, first.items)
	require.Equal(t, 1, dlq.Len())
	assert.Equal(t, "{\"id\":", dlq.Envelopes()[0].Item, "the dead letter holds what the file held")

	again := &recorder[rec]{}
	require.NoError(t, src.Run(context.Background(), again), "the line unchanged")
	assert.Empty(t, again.items)
	assert.Equal(t, 1, dlq.Len(), "not dead-lettered again")

	appendTo(t, path, "2}\n{\"id\":3}\n", false)
	r := &recorder[rec]{}
	require.NoError(t, src.Run(context.Background(), r))
	assert.Equal(t, []rec{{2}, {3}}, r.items)
	assert.Equal(t, 1, dlq.Len())
	whole := runFrom(t, file.JSONL[rec](path), nil)
	assert.Equal(t, whole.pos[1:], r.pos, "the whole file's positions")

	// A resume from the last item's position reads the line too.
	resumed := runFrom(t, file.JSONL[rec](path), first.pos[0])
	assert.Equal(t, []rec{{2}, {3}}, resumed.items)
}

// The same for a CSV record cut inside a quoted field, a bad row without
// LazyQuotes: the next Run reads it whole once the writer ended it.
func TestCSVLastRecordCutInAQuoteIsReadAgainWhole(t *testing.T) {
	t.Parallel()
	path := write(t, "in.csv", "1,a\n2,\"b", false)
	src := file.CSV(path, file.CSVOptions{})
	dlq := deadletterMemory(src)
	first := runFrom(t, src, nil)
	require.Len(t, first.items, 1)
	require.Equal(t, 1, dlq.Len())
	appendTo(t, path, "c\"\n3,d\n", false)
	r := &recorder[file.Record]{}
	require.NoError(t, src.Run(context.Background(), r))
	assert.Equal(t, [][]string{{"2", "bc"}, {"3", "d"}}, fieldsOf(r.items))
	assert.Equal(t, 1, dlq.Len())
}

// Under LazyQuotes a quoted field may be open with an even number of
// quotes: `1,"a"b` is cut inside the field a"b. A resume after it fails
// with ErrPosition whatever is appended, as after an odd number; before,
// the appended "\n" ended it, so the first run's record was cut short and
// the rest of the field came as a record of its own.
func TestCSVLazyQuotesFieldOpenWithEvenQuotes(t *testing.T) {
	t.Parallel()
	opts := file.CSVOptions{LazyQuotes: true, FieldsPerRecord: -1}
	path := write(t, "in.csv", "1,\"a\"b", false)
	src := file.CSV(path, opts)
	first := runFrom(t, src, nil)
	require.Len(t, first.pos, 1)
	appendTo(t, path, "\nx\"\n2,c\n", false)
	whole := runFrom(t, file.CSV(path, opts), nil)
	require.Equal(t, [][]string{{"1", "a\"b\nx"}, {"2", "c"}}, fieldsOf(whole.items))

	require.NoError(t, src.Resume(first.pos[0]))
	r := &recorder[file.Record]{}
	require.ErrorIs(t, src.Run(context.Background(), r), file.ErrPosition)
	assert.Empty(t, r.items)

	// Each last record, then "\n2,c\n" appended: resumed as a line is
	// when no quoted field is open in it, else ErrPosition.
	for _, c := range []struct {
		last string
		trim bool
		open bool
	}{
		{last: "1,ab"},
		{last: "1,\"ab\""},               // closed
		{last: "1,a\"b"},                 // a quote in an unquoted field
		{last: "1,\"a\"\"b\""},           // a doubled quote, closed
		{last: "1,\"a\"\"b", open: true}, // a doubled quote, open
		{last: "\"x\ny\",\"z", open: true},
		{last: "1, \"a\"b", trim: true, open: true},
		{last: "1, \"a\"b"}, // without trim, a space starts the field: unquoted
		{last: "1,\"a\",b"},
	} {
		opts := file.CSVOptions{LazyQuotes: true, FieldsPerRecord: -1, TrimLeadingSpace: c.trim}
		path := write(t, "last.csv", c.last, false)
		src := file.CSV(path, opts)
		first := runFrom(t, src, nil)
		require.Len(t, first.pos, 1, "%q", c.last)
		appendTo(t, path, "\n2,c\n", false)
		require.NoError(t, src.Resume(first.pos[0]))
		r := &recorder[file.Record]{}
		err := src.Run(context.Background(), r)
		if c.open {
			assert.ErrorIs(t, err, file.ErrPosition, "%q", c.last)
			continue
		}
		require.NoError(t, err, "%q", c.last)
		assert.Equal(t, [][]string{{"2", "c"}}, fieldsOf(r.items), "%q", c.last)
		whole := runFrom(t, file.CSV(path, opts), nil)
		assert.Equal(t, fieldsOf(whole.items)[1:], fieldsOf(r.items), "%q: as the whole file", c.last)
	}
}

func fieldsOf(rs []file.Record) [][]string {
	var out [][]string
	for _, r := range rs {
		out = append(out, r.Fields)
	}
	return out
}

// A gzip file cut just before the byte that ends a position's line says
// that the stream is truncated, as docs/files.md does, not that the
// position is past the end of the file.
func TestGzipCutJustBeforeThePositionSaysTruncated(t *testing.T) {
	t.Parallel()
	all := runFrom(t, file.Lines(write(t, "full.txt", "a\nb\nc\n", false)), nil)
	require.Len(t, all.pos, 3)
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	_, err := w.Write([]byte("a\nb\nc")) // cut before "c"'s "\n" and the trailer
	require.NoError(t, err)
	require.NoError(t, w.Flush())
	cut := write(t, "cut.txt.gz", "", false)
	require.NoError(t, os.WriteFile(cut, b.Bytes(), 0o600))

	src := file.Lines(cut)
	require.NoError(t, src.Resume(all.pos[2]))
	err = src.Open(context.Background())
	require.ErrorIs(t, err, file.ErrPosition)
	assert.Contains(t, err.Error(), "truncated")
}
