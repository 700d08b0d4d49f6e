package file_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"testing"

	"github.com/sluicehq/sluice/connector/file"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// appendTo appends content to the file at path, as a writer that goes on
// writing it does; with zip, as one more gzip stream.
func appendTo(t *testing.T, path, content string, zip bool) {
	t.Helper()
	data := []byte(content)
	if zip {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, err := w.Write(data)
		require.NoError(t, err)
		require.NoError(t, w.Close())
		data = b.Bytes()
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.Write(data)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// docs/files.md: the last line may lack its end, and a file that changed
// only after the position is not noticed. A writer that appends to a file
// whose last line had no end first ends that line: the run that resumes
// after it emits only the lines after it, with the positions a run of the
// whole file gives them.
func TestLinesResumeAfterAppendToUnterminatedLastLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, content, appended string
		want                    []string
	}{
		{"LF", "a\nb", "\nc\n", []string{"c"}},
		{"CRLF", "a\r\nb", "\r\nc\r\n", []string{"c"}},
		{"LF after a CR the line ended with", "a\nb\r", "\nc\n", []string{"c"}},
		{"only a newline", "a\nb", "\n", nil},
		{"only a CRLF", "a\r\nb", "\r\n", nil},
		{"empty line after", "a\nb", "\n\nc", []string{"", "c"}},
	} {
		for _, zip := range []bool{false, true} {
			t.Run(tc.name+map[bool]string{true: " gzip"}[zip], func(t *testing.T) {
				t.Parallel()
				path := write(t, "in.txt", tc.content, zip)
				src := file.Lines(path)
				first := runFrom(t, src, nil)
				require.Len(t, first.pos, 2)
				appendTo(t, path, tc.appended, zip)
				whole := runFrom(t, file.Lines(path), nil)

				require.NoError(t, src.Resume(first.pos[1]))
				require.NoError(t, src.Open(context.Background()))
				if !zip {
					assert.Equal(t, int64(len(tc.want)), src.Size())
				}
				r := &recorder[string]{}
				require.NoError(t, src.Run(context.Background(), r), "resume after appending to the file")
				assert.Equal(t, tc.want, r.items)
				assert.Equal(t, append([]string(nil), whole.items[2:]...), r.items)
				assert.Equal(t, append([][]byte(nil), whole.pos[2:]...), r.pos, "the positions of a run of the whole file")
			})
		}
	}
}

// Within one run (a node restart), a second Run goes on after the last
// line emitted, also when the file grew after a last line without its end.
func TestLinesSecondRunAfterAppendToUnterminatedLastLine(t *testing.T) {
	t.Parallel()
	path := write(t, "in.txt", "a\nb", false)
	src := file.Lines(path)
	r1 := &recorder[string]{}
	require.NoError(t, src.Run(context.Background(), r1))
	assert.Equal(t, []string{"a", "b"}, r1.items)
	appendTo(t, path, "\nc\n", false)
	r2 := &recorder[string]{}
	require.NoError(t, src.Run(context.Background(), r2))
	assert.Equal(t, []string{"c"}, r2.items)
}

// A writer that wrote "\r" of a "\r\n" and not yet the "\n": the run after
// the last line emits nothing, and one after the writer finished emits the
// next line.
func TestLinesResumeWhileTheLastLinesCRLFIsHalfWritten(t *testing.T) {
	t.Parallel()
	path := write(t, "in.txt", "a\r\nb", false)
	src := file.Lines(path)
	first := runFrom(t, src, nil)
	require.Len(t, first.pos, 2)
	appendTo(t, path, "\r", false)
	mid := runFrom(t, src, first.pos[1])
	assert.Empty(t, mid.items)
	assert.Equal(t, int64(0), src.Size())
	appendTo(t, path, "\nc\r\n", false)
	rest := runFrom(t, src, first.pos[1])
	assert.Equal(t, []string{"c"}, rest.items)
	// A second Run after the one that emitted nothing does the same.
	require.NoError(t, src.Resume(first.pos[1]))
	appendTo(t, path, "d\r\n", false)
	r := &recorder[string]{}
	require.NoError(t, src.Run(context.Background(), r))
	assert.Equal(t, []string{"c", "d"}, r.items)
}

// A writer that was in the middle of the last line when the source read
// it: the line emitted was cut short. What the writer adds to it is not
// emitted as a line of its own: the resumed run fails with ErrPosition.
func TestLinesResumeAfterTheUnterminatedLastLineWasContinuedIsAnError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ content, appended string }{
		{"a\nb", "more\n"},
		{"a\nb", "\rx\n"},      // a lone "\r" inside the line
		{"a\nb\r", "\r\n"},     // the line was "b\r", not "b" and its "\r\n"
		{"a\r\nb", "more\r\n"}, // CRLF
	} {
		path := write(t, "in.txt", tc.content, false)
		src := file.Lines(path)
		first := runFrom(t, src, nil)
		require.Len(t, first.pos, 2)
		appendTo(t, path, tc.appended, false)

		require.NoError(t, src.Resume(first.pos[1]))
		r := &recorder[string]{}
		err := src.Run(context.Background(), r)
		require.ErrorIs(t, err, file.ErrPosition, "%q then %q", tc.content, tc.appended)
		assert.Contains(t, err.Error(), path)
		assert.Contains(t, err.Error(), "continues the last line")
		assert.Empty(t, r.items)

		// So does a second Run of the source that emitted the line.
		src = file.Lines(write(t, "in.txt", tc.content, false))
		require.NoError(t, src.Run(context.Background(), &recorder[string]{}))
		appendTo(t, src.Path(), tc.appended, false)
		require.ErrorIs(t, src.Run(context.Background(), &recorder[string]{}), file.ErrPosition)
	}
}

// A file replaced by another whose byte before the position is no line
// end, though a line end was there, or is one, though the position was
// after a last line without its end, is a position that does not fit.
func TestLinesAPositionInAReplacedFileIsAnError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, content, replaced string
		item                    int
	}{
		{"shorter, without a line end", "line1\nline2\nline3\n", "abcdeX", 0},
		{"a line end where the last line had none", "a\nb", "a\n\nc\n", 1},
	} {
		for _, zip := range []bool{false, true} {
			path := write(t, "in.txt", tc.content, zip)
			src := file.Lines(path)
			first := runFrom(t, src, nil)
			require.NoError(t, os.WriteFile(path, []byte(tc.replaced), 0o600))
			if zip {
				path = write(t, "in.txt", tc.replaced, true)
				src = file.Lines(path)
			}
			require.NoError(t, src.Resume(first.pos[tc.item]))
			r := &recorder[string]{}
			err := src.Run(context.Background(), r)
			require.ErrorIs(t, err, file.ErrPosition, "%s: got items %q", tc.name, r.items)
			assert.Contains(t, err.Error(), path)
			assert.Contains(t, err.Error(), "the file changed")
		}
	}
}

// CSV and JSONL share the path: after a record or JSON line without its
// line end, what a writer appends is read on, with the line numbers of
// the whole file.
func TestCSVAndJSONLResumeAfterAppendToUnterminatedLastLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, opts := range []file.CSVOptions{{Header: true}, {}} {
		path := write(t, "in.csv", "id,n\n1,a", false)
		src := file.CSV(path, opts)
		first := runFrom(t, src, nil)
		appendTo(t, path, "\r\n2,b\r\n", false)
		whole := runFrom(t, file.CSV(path, opts), nil)
		rest := runFrom(t, src, first.pos[len(first.pos)-1])
		require.Len(t, rest.items, 1)
		assert.Equal(t, []string{"2", "b"}, rest.items[0].Fields)
		assert.Equal(t, int64(3), rest.items[0].Line)
		assert.Equal(t, whole.pos[len(whole.pos)-1], rest.pos[0])
		assert.Equal(t, int64(1), src.Size())
	}

	path := write(t, "in.jsonl", "{\"id\":1}", false)
	src := file.JSONL[order](path)
	first := runFrom(t, src, nil)
	require.Len(t, first.pos, 1)
	appendTo(t, path, "\nnot json\n", false)
	require.NoError(t, src.Resume(first.pos[0]))
	err := src.Run(ctx, &recorder[order]{})
	var re *file.RowError
	require.True(t, errors.As(err, &re), "%v", err)
	assert.Equal(t, int64(2), re.Line, "the line of the whole file")
}

// Positions are kept in checkpoints: one that an earlier version of the
// package saved (version 1: an offset, lines and fields) still resumes,
// also after a last line without its end that a writer has since ended.
func TestAPositionOfTheEarlierEncodingStillResumes(t *testing.T) {
	t.Parallel()
	path := write(t, "in.txt", "a\nb\n", false)
	rest := runFrom(t, file.Lines(path), []byte{1, 2, 1, 0})
	assert.Equal(t, []string{"b"}, rest.items)

	path = write(t, "in.txt", "a\nb", false)
	rest = runFrom(t, file.Lines(path), []byte{1, 3, 2, 0})
	assert.Empty(t, rest.items)
	appendTo(t, path, "\nc\n", false)
	rest = runFrom(t, file.Lines(path), []byte{1, 3, 2, 0})
	assert.Equal(t, []string{"c"}, rest.items)

	src := file.Lines(write(t, "in.txt", "line1\nline2\n", false))
	require.NoError(t, src.Resume([]byte{1, 3, 0, 0}))
	require.ErrorIs(t, src.Open(context.Background()), file.ErrPosition, "not at the end of a line")
}

// A CSV record cut off inside a quoted field (LazyQuotes; a bad row
// without them) at the end of the file may be continued by what a writer
// appends, its "\n" included: the resume fails with ErrPosition rather
// than take the appended "\n" for the record's end and read the rest of
// the field as records of their own. A record without an open quote is
// resumed as a line is.
func TestCSVResumeAfterARecordCutInsideAQuote(t *testing.T) {
	t.Parallel()
	for _, opts := range []file.CSVOptions{{LazyQuotes: true, FieldsPerRecord: -1}, {LazyQuotes: true, Header: true}} {
		path := write(t, "in.csv", "id,n\n1,\"x", false)
		src := file.CSV(path, opts)
		first := runFrom(t, src, nil)
		require.True(t, len(first.pos) > 0)
		appendTo(t, path, "\ny\"\n2,b\n", false)
		require.NoError(t, src.Resume(first.pos[len(first.pos)-1]))
		r := &recorder[file.Record]{}
		err := src.Run(context.Background(), r)
		require.ErrorIs(t, err, file.ErrPosition)
		require.Empty(t, r.items)
	}
	path := write(t, "in.csv", "id,n\n1,\"x\"", false)
	src := file.CSV(path, file.CSVOptions{Header: true})
	first := runFrom(t, src, nil)
	appendTo(t, path, "\n2,b\n", false)
	require.NoError(t, src.Resume(first.pos[len(first.pos)-1]))
	r := &recorder[file.Record]{}
	require.NoError(t, src.Run(context.Background(), r))
	require.Len(t, r.items, 1)
	require.Equal(t, []string{"2", "b"}, r.items[0].Fields)
}
