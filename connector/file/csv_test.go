package file_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/connector/file"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

func TestCSVWithAHeaderNamesTheFields(t *testing.T) {
	t.Parallel()
	content := "\ufeffid,name,id\r\n1,ada,x\r\n\r\n2,\"bob\nsmith\",y\r\n3,cy,z"
	src := file.CSV(write(t, "in.csv", content, false), file.CSVOptions{Header: true})
	r := runFrom(t, src, nil)
	require.Len(t, r.items, 3)
	first := r.items[0]
	assert.Equal(t, []string{"id", "name", "id"}, first.Header, "the BOM is not part of the first name")
	assert.Equal(t, []string{"1", "ada", "x"}, first.Fields)
	assert.Equal(t, int64(2), first.Line)
	assert.Equal(t, "1", first.Get("id"), "a repeated name finds the first column")
	assert.Equal(t, "ada", first.Get("name"))
	v, ok := first.Lookup("age")
	assert.False(t, ok)
	assert.Equal(t, "", v)

	assert.Equal(t, "bob\nsmith", r.items[1].Get("name"))
	assert.Equal(t, int64(4), r.items[1].Line, "the empty line 3 is skipped")
	assert.Equal(t, int64(6), r.items[2].Line)
	// Six lines, one empty, less the header: five, though the quoted
	// line break makes two records of lines 4 and 5.
	assert.Equal(t, int64(4), src.Size())

	// A Record decoded from JSON (a dead letter's) still finds its fields.
	data, err := json.Marshal(r.items[2])
	require.NoError(t, err)
	var back file.Record
	require.NoError(t, json.Unmarshal(data, &back))
	assert.Equal(t, "cy", back.Get("name"))
	assert.Equal(t, int64(6), back.Line)
}

func TestCSVOptionsAreEncodingCSVs(t *testing.T) {
	t.Parallel()
	content := "a; b\"c;d\n1;2\n"
	src := file.CSV(write(t, "in.csv", content, false), file.CSVOptions{
		Comma: ';', LazyQuotes: true, FieldsPerRecord: -1, TrimLeadingSpace: true})
	r := runFrom(t, src, nil)
	require.Len(t, r.items, 2)
	assert.Equal(t, []string{"a", "b\"c", "d"}, r.items[0].Fields)
	assert.Equal(t, []string{"1", "2"}, r.items[1].Fields)
	assert.Nil(t, r.items[0].Header)
	_, ok := r.items[0].Lookup("a")
	assert.False(t, ok, "without a header no field has a name")
}

// memorySource returns a CSV source of content whose dead letters go to a
// memory sink, as the pipeline's source named "orders" would.
func memorySource(t *testing.T, content string, opts file.CSVOptions) (*file.Source[file.Record], *deadletter.Memory) {
	src := file.CSV(write(t, "orders.csv", content, false), opts)
	dlq := deadletter.NewMemory(100)
	src.UseDeadLetter(dlq, deadletter.Envelope{Pipeline: "shop", RunID: "r1", OriginNode: "orders", DecisionNode: "orders"})
	return src, dlq
}

func TestCSVBadRowsAreDeadLetteredNamingFileLineAndColumn(t *testing.T) {
	t.Parallel()
	content := "id,qty\n1,2\n2,x\"y\n3\n4,5\n\"5,6\n"
	src, dlq := memorySource(t, content, file.CSVOptions{Header: true})
	r := runFrom(t, src, nil)
	require.Len(t, r.items, 2)
	assert.Equal(t, []string{"1", "2"}, r.items[0].Fields)
	assert.Equal(t, []string{"4", "5"}, r.items[1].Fields)
	assert.Equal(t, int64(3), src.BadRows())

	envs := dlq.Envelopes()
	require.Len(t, envs, 3)
	for i, want := range []struct {
		item         string
		line         int64
		column       int
		err          error
		text, posOff string
	}{
		{item: "2,x\"y", line: 3, column: 4, err: csv.ErrBareQuote,
			text: `file: ` + src.Path() + `:3:4: bare " in non-quoted-field`},
		{item: "3", line: 4, column: 1, err: csv.ErrFieldCount,
			text: `file: ` + src.Path() + `:4:1: wrong number of fields: 1 fields, want 2`},
		// An open quote runs to the end of the file.
		{item: "\"5,6", line: 6, column: 6, err: csv.ErrQuote},
	} {
		env := envs[i]
		assert.Equal(t, want.item, env.Item, "the row as it stands in the file")
		assert.Equal(t, "string", env.ItemType)
		var re *file.RowError
		require.ErrorAs(t, env.Err, &re)
		assert.Equal(t, src.Path(), re.Path)
		assert.Equal(t, want.line, re.Line, "row %d", i)
		assert.Equal(t, want.column, re.Column, "row %d", i)
		assert.ErrorIs(t, env.Err, want.err)
		assert.ErrorIs(t, env.Err, file.ErrBadRow)
		if want.text != "" {
			assert.Equal(t, want.text, env.ErrText)
		}
		assert.Equal(t, "shop", env.Pipeline)
		assert.Equal(t, "orders", env.OriginNode)
		assert.Equal(t, "orders", env.Source)
		assert.NotEmpty(t, env.Position)
		assert.False(t, env.LastFailure.IsZero())
	}
	// The position of a bad row resumes after it.
	again, dlq2 := memorySource(t, content, file.CSVOptions{Header: true})
	rest := runFrom(t, again, envs[1].Position)
	require.Len(t, rest.items, 1)
	assert.Len(t, dlq2.Envelopes(), 1)
	assert.Equal(t, []string{"4", "5"}, rest.items[0].Fields)
}

func TestCSVResumedKeepsTheFieldCountAndLineNumbers(t *testing.T) {
	t.Parallel()
	// No header: the first record sets the field count, and a resumed
	// source still holds rows to it.
	content := "a,b,c\nd,e,f\ng,h\ni,j,k\n"
	src, dlq := memorySource(t, content, file.CSVOptions{})
	all := runFrom(t, src, nil)
	require.Len(t, all.items, 3)
	require.Len(t, dlq.Envelopes(), 1)

	again, dlq2 := memorySource(t, content, file.CSVOptions{})
	rest := runFrom(t, again, all.pos[1])
	require.Len(t, rest.items, 1)
	assert.Equal(t, []string{"i", "j", "k"}, rest.items[0].Fields)
	assert.Equal(t, int64(4), rest.items[0].Line)
	envs := dlq2.Envelopes()
	require.Len(t, envs, 1)
	var re *file.RowError
	require.ErrorAs(t, envs[0].Err, &re)
	assert.Equal(t, int64(3), re.Line, "lines count from the file's start after a resume")
	assert.ErrorIs(t, re, csv.ErrFieldCount)
	assert.Equal(t, dlq.Envelopes()[0].Position, envs[0].Position)
}

func TestCSVWithAHeaderResumedReadsItAgain(t *testing.T) {
	t.Parallel()
	for _, zip := range []bool{false, true} {
		content := "id,name\n1,ada\n2,bob\n"
		src := file.CSV(write(t, "in.csv", content, zip), file.CSVOptions{Header: true})
		all := runFrom(t, src, nil)
		require.Len(t, all.items, 2)
		rest := runFrom(t, src, all.pos[0])
		require.Len(t, rest.items, 1)
		assert.Equal(t, "bob", rest.items[0].Get("name"))
		assert.Equal(t, int64(3), rest.items[0].Line)
		if !zip {
			assert.Equal(t, int64(1), src.Size(), "the resumed run reads one record")
		}
	}
}

func TestCSVABadHeaderFailsTheRun(t *testing.T) {
	t.Parallel()
	src, dlq := memorySource(t, "id,\"na\"me\n1,2\n", file.CSVOptions{Header: true})
	err := src.Run(context.Background(), &recorder[file.Record]{})
	var re *file.RowError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, int64(1), re.Line)
	assert.Contains(t, err.Error(), "header")
	assert.Empty(t, dlq.Envelopes())
}

func TestCSVWithoutADeadLetterSinkABadRowFailsTheRun(t *testing.T) {
	t.Parallel()
	src := file.CSV(write(t, "in.csv", "a,b\n1,2\n3\n4,5\n", false), file.CSVOptions{Header: true})
	src.UseDeadLetter(nil, deadletter.Envelope{OriginNode: "orders"})
	r := &recorder[file.Record]{}
	err := src.Run(context.Background(), r)
	var re *file.RowError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, int64(3), re.Line)
	assert.Contains(t, err.Error(), src.Path()+":3:1")
	assert.Contains(t, err.Error(), "no dead-letter sink")
	assert.Len(t, r.items, 1, "the rows before it were emitted")
	assert.Equal(t, int64(0), src.BadRows())
}

func TestCSVADeadLetterWriteThatFailsKeepsTheRow(t *testing.T) {
	t.Parallel()
	src := file.CSV(write(t, "in.csv", "a,b\n1,2\n3\n4,5\n", false), file.CSVOptions{Header: true})
	refused := errors.New("disk full")
	src.UseDeadLetter(deadletter.Func(func(context.Context, deadletter.Envelope) error { return refused }),
		deadletter.Envelope{OriginNode: "orders"})
	ctx := context.Background()
	r := &recorder[file.Record]{}
	err := src.Run(ctx, r)
	require.ErrorIs(t, err, refused)
	assert.Contains(t, err.Error(), src.Path()+":3: dead-letter the bad row")
	assert.Len(t, r.items, 1)

	// The next Run (a node restart) reads the row again.
	dlq := deadletter.NewMemory(10)
	src.UseDeadLetter(dlq, deadletter.Envelope{OriginNode: "orders"})
	require.NoError(t, src.Run(ctx, r))
	require.Len(t, dlq.Envelopes(), 1)
	assert.Equal(t, "3", dlq.Envelopes()[0].Item)
	require.Len(t, r.items, 2)
	assert.Equal(t, []string{"4", "5"}, r.items[1].Fields)
	assert.Equal(t, int64(1), src.BadRows())
}

func TestCSVAnEmptyFileEmitsNothing(t *testing.T) {
	t.Parallel()
	for _, opts := range []file.CSVOptions{{}, {Header: true}} {
		for _, content := range []string{"", "\n\n", "id,name\n"} {
			src := file.CSV(write(t, "in.csv", content, false), opts)
			r := runFrom(t, src, nil)
			if opts.Header || content != "id,name\n" {
				assert.Empty(t, r.items, "%q", content)
				assert.Equal(t, int64(0), src.Size(), "%q", content)
			}
		}
	}
}

func TestCSVAnInvalidSeparatorFailsTheRunNamingTheOption(t *testing.T) {
	t.Parallel()
	for _, comma := range []rune{'"', '\n', 0xFFFD} {
		src := file.CSV(write(t, "in.csv", "a,b\n", false), file.CSVOptions{Comma: comma})
		err := src.Run(context.Background(), &recorder[file.Record]{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "CSVOptions.Comma")
		assert.Contains(t, err.Error(), src.Path())
	}
}
