package file_test

// A second review of the half-written last line and of quoteOpen.

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/connector/file"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// appendingSink is a dead-letter sink that, at its first write, runs
// onFirst (a writer finishing the half-written line meanwhile).
type appendingSink struct {
	envs    []deadletter.Envelope
	onFirst func()
}

func (s *appendingSink) Write(_ context.Context, env deadletter.Envelope) error {
	s.envs = append(s.envs, env)
	if len(s.envs) == 1 && s.onFirst != nil {
		s.onFirst()
	}
	return nil
}

// The writer ends the half-written last line while the same Run is
// dead-lettering it. A Run that read on after the half line read its tail
// as a row of its own and moved past it: {"id":2} was never emitted. The
// Run now ends at the half line, and the next reads it whole.
func TestJSONLHalfLineFinishedDuringTheRunIsEmittedWhole(t *testing.T) {
	t.Parallel()
	type rec struct {
		ID int `json:"id"`
	}
	path := write(t, "in.jsonl", "{\"id\":1}\n{\"id\":", false)
	src := file.JSONL[rec](path)
	sink := &appendingSink{onFirst: func() { appendTo(t, path, "2}\n{\"id\":3}\n", false) }}
	src.UseDeadLetter(sink, deadletter.Envelope{OriginNode: "src", DecisionNode: "src"})
	r := &recorder[rec]{}
	require.NoError(t, src.Run(context.Background(), r))
	again := &recorder[rec]{}
	require.NoError(t, src.Run(context.Background(), again))
	got := append(append([]rec{}, r.items...), again.items...)
	var items []any
	for _, e := range sink.envs {
		items = append(items, e.Item)
	}
	assert.Contains(t, got, rec{2}, "emitted %v; dead letters %q", got, items)
}

// The same for CSV, a record cut inside a quote.
func TestCSVCutRecordFinishedDuringTheRunIsEmittedWhole(t *testing.T) {
	t.Parallel()
	path := write(t, "in.csv", "1,a\n2,\"b", false)
	src := file.CSV(path, file.CSVOptions{})
	sink := &appendingSink{onFirst: func() { appendTo(t, path, "c\"\n3,d\n", false) }}
	src.UseDeadLetter(sink, deadletter.Envelope{OriginNode: "src", DecisionNode: "src"})
	r := &recorder[file.Record]{}
	require.NoError(t, src.Run(context.Background(), r))
	again := &recorder[file.Record]{}
	require.NoError(t, src.Run(context.Background(), again))
	got := append(fieldsOf(r.items), fieldsOf(again.items)...)
	assert.Contains(t, got, []string{"2", "bc"}, "emitted %q; %d dead letters", got, len(sink.envs))
}

// Under LazyQuotes a "\r" inside the line leaves a quoted field open
// (`"a"\rb` after the quote; with TrimLeadingSpace, `\r"ab` before it,
// which encoding/csv trims as white space): a resume after the record fails
// with ErrPosition, or gives what the whole file gives, never a record cut
// short and a record that is not in the file.
func TestCSVLazyQuotesFieldOpenWithACarriageReturn(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		last string
		trim bool
	}{
		{last: "1,\"a\"\rb"},
		{last: "1,\r\"ab", trim: true},
	} {
		opts := file.CSVOptions{LazyQuotes: true, FieldsPerRecord: -1, TrimLeadingSpace: c.trim}
		path := write(t, "last.csv", c.last, false)
		src := file.CSV(path, opts)
		first := runFrom(t, src, nil)
		require.Len(t, first.pos, 1, "%q", c.last)
		appendTo(t, path, "\nx\"\n2,c\n", false)
		whole := runFrom(t, file.CSV(path, opts), nil)
		require.NoError(t, src.Resume(first.pos[0]))
		r := &recorder[file.Record]{}
		err := src.Run(context.Background(), r)
		if err == nil {
			assert.Equal(t, fieldsOf(whole.items)[1:], fieldsOf(r.items),
				"%q: first run gave %q; the resumed run must fail with ErrPosition or match the whole file", c.last, fieldsOf(first.items))
		}
	}
}
