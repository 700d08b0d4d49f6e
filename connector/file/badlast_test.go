package file_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/connector/file"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// A bad last line without its end is dead-lettered once by a source,
// however many Runs find it as it was: the source does not move past it
// (a writer may be in the middle of it), and reading it again is not a
// new bad row. Once it changes it is dead-lettered again (it is another
// row); once it gets its end unchanged, the source moves on past it
// without a second dead letter; once it is finished into a good line, it
// is emitted.
func TestBadLastLineIsDeadLetteredOncePerVersion(t *testing.T) {
	t.Parallel()
	type rec struct {
		ID int `json:"id"`
	}
	for _, tc := range []struct {
		name      string
		appended  string // after the third Run
		letters   int    // dead letters in all
		emitted   []rec  // by the Run after the append
		lastEnded bool
	}{
		{name: "left as it is", appended: "", letters: 1},
		{name: "grown, still bad", appended: "x", letters: 2},
		{name: "given its end", appended: "\n{\"id\":3}\n", letters: 1, emitted: []rec{{3}}},
		{name: "given its end, CRLF", appended: "\r\n{\"id\":3}", letters: 1, emitted: []rec{{3}}},
		{name: "finished into a good line", appended: "\"id\":2}\n", letters: 1, emitted: []rec{{2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := write(t, "in.jsonl", "{\"id\":1}\n{", false)
			src, sink := deadLettering[rec](path)
			first := &recorder[rec]{}
			require.NoError(t, src.Run(context.Background(), first))
			assert.Equal(t, []rec{{1}}, first.items)
			for range 2 {
				again := &recorder[rec]{}
				require.NoError(t, src.Run(context.Background(), again))
				assert.Empty(t, again.items)
			}
			require.Len(t, sink.envs, 1, "the half line dead-lettered once")
			assert.Equal(t, "{", sink.envs[0].Item)
			if tc.appended != "" {
				appendTo(t, path, tc.appended, false)
			}
			after := &recorder[rec]{}
			require.NoError(t, src.Run(context.Background(), after))
			assert.Equal(t, tc.emitted, after.items)
			assert.Len(t, sink.envs, tc.letters)
			assert.Equal(t, int64(tc.letters), src.BadRows())
		})
	}
}

// A bad line in the middle of the file (with its end) is dead-lettered
// once, and the source moves past it: the half-line rule changes nothing
// for it.
func TestBadMiddleLineIsDeadLetteredOnce(t *testing.T) {
	t.Parallel()
	type rec struct {
		ID int `json:"id"`
	}
	path := write(t, "in.jsonl", "{\"id\":1}\n{\n{\"id\":2}\n", false)
	src, sink := deadLettering[rec](path)
	r := &recorder[rec]{}
	require.NoError(t, src.Run(context.Background(), r))
	require.NoError(t, src.Run(context.Background(), r))
	assert.Equal(t, []rec{{1}, {2}}, r.items)
	assert.Len(t, sink.envs, 1)
}

// A Resume to another position reads again every row after it, bad rows
// included: the last line dead-lettered without its end is dead-lettered
// again by the resumed run, once. A Resume to where that line starts (the
// position of the item before it, which a pipeline's checkpoint holds)
// finds it as the source left it, and does not.
func TestResumeDeadLettersTheBadLastLineAgainOnlyFromElsewhere(t *testing.T) {
	t.Parallel()
	type rec struct {
		ID int `json:"id"`
	}
	path := write(t, "in.jsonl", "{\"id\":1}\n{", false)
	src, sink := deadLettering[rec](path)
	first := &recorder[rec]{}
	require.NoError(t, src.Run(context.Background(), first))
	require.Len(t, first.pos, 1)
	for range 2 {
		require.NoError(t, src.Resume(first.pos[0]))
		require.NoError(t, src.Run(context.Background(), &recorder[rec]{}))
	}
	assert.Len(t, sink.envs, 1, "resumed where the line starts: not again")
	require.NoError(t, src.Resume(nil))
	again := &recorder[rec]{}
	require.NoError(t, src.Run(context.Background(), again))
	assert.Equal(t, []rec{{1}}, again.items)
	require.NoError(t, src.Run(context.Background(), &recorder[rec]{}))
	assert.Len(t, sink.envs, 2, "resumed from the start: once more, and no more")
	assert.Equal(t, int64(2), src.BadRows())
}

// In a pipeline, whose every run resumes from its checkpoint, the
// unchanged half line is dead-lettered by the first run only.
func TestBadLastLineInAPipelineIsDeadLetteredOnce(t *testing.T) {
	t.Parallel()
	c := newCheckpointed(t, write(t, "orders.jsonl", "{\"id\":1}\n{", false))
	c.run(t, 3)
	assert.Len(t, c.out.Items(), 1)
	assert.Len(t, c.dl.Envelopes(), 1, "the unchanged half line dead-lettered once")
	assert.Equal(t, int64(1), c.src.BadRows())
}

// The bad rows after the last item (whole ones, and the last line without
// its end) are dead-lettered by the first of a pipeline's runs only, when
// the pipeline runs the same source again: each run resumes from the
// checkpoint, the position of the item before them. A good row appended
// after them is emitted, and the bad rows before it are not
// dead-lettered again on the way.
func TestBadRowsAfterTheLastItemAreDeadLetteredOncePerSource(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, content string }{
		{"bad rows", "{\"id\":1}\nbad1\nbad2\n"},
		{"a bad row and a half line", "{\"id\":1}\nbad\n{"},
		{"bad rows only", "bad1\nbad2\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := write(t, "orders.jsonl", tc.content, false)
			c := newCheckpointed(t, path)
			c.run(t, 3)
			assert.Len(t, c.dl.Envelopes(), 2, "each bad row dead-lettered once")
			assert.Equal(t, int64(2), c.src.BadRows())
			if strings.HasSuffix(tc.content, "{") {
				appendTo(t, path, "\"id\":2}\n", false) // the half line, finished
			} else {
				appendTo(t, path, "{\"id\":2}\n", false)
			}
			before := len(c.out.Items())
			c.run(t, 2)
			assert.Equal(t, []order{{ID: 2}}, c.out.Items()[before:])
			assert.Len(t, c.dl.Envelopes(), 2, "the bad rows before the new item, not again")
		})
	}
}

// The last line without its end is remembered beside the other bad rows
// after the last item, however many of them there are: past the cap of
// those (4096), a source that forgot it would dead-letter it again on
// every Run, as each Run ends before it.
func TestHalfLinePastTheTailCapIsDeadLetteredOnce(t *testing.T) {
	t.Parallel()
	for _, bad := range []int{0, 1, 4095, 4096, 4097} {
		t.Run(fmt.Sprint(bad), func(t *testing.T) {
			t.Parallel()
			var b strings.Builder
			b.WriteString("{\"id\":1}\n")
			for i := range bad {
				fmt.Fprintf(&b, "bad%d\n", i)
			}
			b.WriteString("{")
			path := write(t, "in.jsonl", b.String(), false)
			c := newCheckpointed(t, path)
			c.run(t, 3)
			mem := c.dl
			// Rows past the cap are dead-lettered again by each run
			// resumed before them; the half line is not.
			past := max(0, bad-4096)
			assert.Equal(t, bad+1+2*past, len(mem.Envelopes()))
			last := mem.Envelopes()[bad]
			assert.Equal(t, "{", fmt.Sprint(last.Item), "the half line, dead-lettered after the whole rows")
			for _, e := range mem.Envelopes()[bad+1:] {
				assert.NotEqual(t, "{", fmt.Sprint(e.Item), "the half line, dead-lettered once")
			}
			appendTo(t, path, "\"id\":2}\n", false)
			c.run(t, 1)
			assert.Equal(t, []order{{ID: 1}, {ID: 2}}, c.out.Items())
		})
	}
}

// A tail that starts at the file's start (no item before its bad rows) is
// where Resume(nil) resumes, as a pipeline with no checkpoint yet does:
// the resumed run finds them as they were and dead-letters none again.
func TestResumeAtTheStartKeepsATailThatStartsThere(t *testing.T) {
	t.Parallel()
	path := write(t, "in.jsonl", "bad1\nbad2\n{", false)
	src, sink := deadLettering[order](path)
	require.NoError(t, src.Run(context.Background(), &recorder[order]{}))
	require.Len(t, sink.envs, 3)
	require.NoError(t, src.Resume(nil))
	require.NoError(t, src.Run(context.Background(), &recorder[order]{}))
	assert.Len(t, sink.envs, 3)
	assert.Equal(t, int64(3), src.BadRows())
}

// The last line without its end, given its end unchanged and followed by
// a new last line without its end, stays remembered once that one is:
// a pipeline's next run, resumed from its checkpoint, finds both as they
// were. Past the cap of the other bad rows too.
func TestEndedHalfLineStaysRememberedWhenANewHalfLineFollows(t *testing.T) {
	t.Parallel()
	for _, bad := range []int{0, 4096} {
		t.Run(fmt.Sprint(bad), func(t *testing.T) {
			t.Parallel()
			var b strings.Builder
			b.WriteString("{\"id\":1}\n")
			for i := range bad {
				fmt.Fprintf(&b, "bad%d\n", i)
			}
			b.WriteString("{")
			path := write(t, "in.jsonl", b.String(), false)
			src, sink := deadLettering[order](path)
			first := &recorder[order]{}
			require.NoError(t, src.Run(context.Background(), first))
			require.Len(t, first.pos, 1)
			require.Len(t, sink.envs, bad+1)
			appendTo(t, path, "\n{{", false) // the half line ended, a new one
			require.NoError(t, src.Run(context.Background(), &recorder[order]{}))
			require.Len(t, sink.envs, bad+2, "the new half line only")
			for range 2 {
				require.NoError(t, src.Resume(first.pos[0]))
				require.NoError(t, src.Run(context.Background(), &recorder[order]{}))
			}
			// Past the cap, the whole bad rows come again; the two
			// lines that were the half line do not.
			past := max(0, bad-4096)
			assert.Len(t, sink.envs, bad+2+2*past)
			for _, e := range sink.envs[bad+2:] {
				assert.NotContains(t, []string{"{", "{{"}, fmt.Sprint(e.Item))
			}
		})
	}
}

// checkpointed is a pipeline that reads path with a JSONL source, keeps
// its checkpoint in memory and its dead letters in mem: each of its runs
// resumes where the last one saved, as a pipeline's next run does.
type checkpointed struct {
	p   *pipeline.Pipeline
	src *file.Source[order]
	out *pipelinetest.Collector[order]
	dl  *deadletter.Memory
}

func newCheckpointed(t *testing.T, path string) checkpointed {
	t.Helper()
	c := checkpointed{src: file.JSONL[order](path), out: &pipelinetest.Collector[order]{}, dl: deadletter.NewMemory(10000)}
	b := pipeline.New("orders", pipeline.WithCheckpoint(checkpoint.NewMemory(), time.Hour), pipeline.WithDeadLetter(c.dl))
	pipeline.Sink(b, "write", pipeline.Source(b, "read", c.src), c.out)
	var err error
	c.p, err = b.Build()
	require.NoError(t, err)
	return c
}

// run runs the pipeline n times, each run succeeding.
func (c checkpointed) run(t *testing.T, n int) {
	t.Helper()
	for range n {
		_, err := c.p.Run(t.Context())
		require.NoError(t, err)
	}
}

// deadLettering is a JSONL source of path whose bad rows go to the sink
// it returns.
func deadLettering[T any](path string) (*file.Source[T], *appendingSink) {
	src := file.JSONL[T](path)
	sink := &appendingSink{}
	src.UseDeadLetter(sink, deadletter.Envelope{OriginNode: "src", DecisionNode: "src"})
	return src, sink
}
