package progress_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/progress"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// A tick that samples a run before its first node event must not begin
// the run from the sample before, which missed what the run before
// settled at its end (the tracked items its end failed): before, those
// were shown as this run's, "settled 30%" of a run none of whose items
// had settled. drawAtTheTick also checks the frame the tick draws itself.
func TestATickBeforeARunsFirstEventStartsFromItsCounters(t *testing.T) {
	for _, drawAtTheTick := range []bool{false, true} {
		t.Run(map[bool]string{false: "later frames", true: "the tick's frame"}[drawAtTheTick], func(t *testing.T) {
			h := newHarness(t, progress.WithTTY(false), progress.WithInterval(time.Second), progress.WithWindow(5*time.Second))
			src := source("read")
			src.Size, src.Sized = 10, true
			r := newReader(src, sink("store"))
			require.NoError(t, h.rep.UseStats(r))
			h.start()
			ev := func(id, n string) observer.NodeEvent {
				return observer.NodeEvent{Event: observer.Event{Pipeline: "orders", RunID: id, Node: n}}
			}
			// Run 1: ten tracked items emitted, seven settled.
			r.startRun("run-1")
			h.rep.OnNodeStarted(ev("run-1", "read"))
			h.rep.OnNodeStarted(ev("run-1", "store"))
			r.set(func(st *observer.Stats) {
				st.Nodes[0].Out, st.Nodes[0].Tracked, st.Nodes[0].Settled = 10, 10, 7
				st.Nodes[1].In, st.Nodes[1].Out = 7, 7
			})
			h.tick()
			r.set(func(st *observer.Stats) { st.Running = false })
			h.rep.OnNodeCompleted(ev("run-1", "read"))
			h.rep.OnNodeCompleted(ev("run-1", "store"))
			// The run's end fails the three tracked items left: they
			// settle after its last node completed.
			r.set(func(st *observer.Stats) { st.Nodes[0].Settled = 10 })
			h.out.take()
			// Run 2 starts; the Reporter ticks before its first node
			// event, and the run emits five items, none settled.
			r.startRun("run-2")
			if drawAtTheTick {
				for range 4 {
					h.tick()
				}
				r.set(func(st *observer.Stats) { st.Nodes[0].Out, st.Nodes[0].Tracked = 15, 15 })
				h.tick()
				w := h.out.take()
				require.NotEmpty(t, w)
				assert.Contains(t, w[len(w)-1], "settled 0%", "nothing of run 2 settled")
				return
			}
			h.tick()
			h.rep.OnNodeStarted(ev("run-2", "read"))
			h.rep.OnNodeStarted(ev("run-2", "store"))
			r.set(func(st *observer.Stats) { st.Nodes[0].Out, st.Nodes[0].Tracked = 15, 15 })
			for range 5 {
				h.tick()
			}
			w := h.out.take()
			require.NotEmpty(t, w)
			assert.Contains(t, w[len(w)-1], "read 5/10", "run 2 read five")
			assert.Contains(t, w[len(w)-1], "settled 0%", "nothing of run 2 settled")
		})
	}
}

// refuser is a StatsUser that refuses every pipeline, as a Prometheus
// Collector refuses a second pipeline of a name it observes.
type refuser struct{ observer.Nop }

func (refuser) UseStats(observer.StatsReader) error { return errRefused }

var errRefused = errors.New("refused")

// A pipeline whose Build failed after the Reporter took it (another
// observer of a Multi refused it) is forgotten: before, the Reporter kept
// it, counted two pipelines, and prefixed the lines of the one that runs
// with its name, as it does when it shows several.
func TestAFailedBuildLeavesNoPipelineInTheReporter(t *testing.T) {
	h := newHarness(t, progress.WithTTY(false), progress.WithInterval(time.Second))
	bad := pipeline.New("other", pipeline.WithObserver(observer.Multi(h.rep, refuser{})))
	pipeline.Sink(bad, "store", pipeline.Source(bad, "read", pipelinetest.NewSliceSource(1, 2, 3)), &pipelinetest.Collector[int]{})
	_, err := bad.Build()
	require.ErrorIs(t, err, errRefused)

	b := pipeline.New("orders", pipeline.WithObserver(h.rep))
	pipeline.Sink(b, "store", pipeline.Source(b, "read", pipelinetest.NewSliceSource(1, 2, 3)), &pipelinetest.Collector[int]{})
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(t.Context())
	require.NoError(t, err)
	h.rep.Stop()
	w := strings.Join(h.out.take(), "")
	assert.Contains(t, w, "read 3/3")
	assert.False(t, strings.HasPrefix(w, "orders"), "one pipeline: its line is not prefixed with its name: %q", w)
}

// A run that a tick saw before its first node event, and whose counters
// were re-based at that event, starts when it started, not at the last
// sample of the pipeline, which may be long before (the Reporter did not
// tick while no run was live): the first fix of the run seen by a tick
// kept that start, and showed "1h00m02s" and rates near zero for a run
// two seconds old. (Found by a review.)
func TestARunSeenByATickStartsWhenItStarted(t *testing.T) {
	h := newHarness(t, progress.WithTTY(false), progress.WithInterval(time.Second), progress.WithWindow(5*time.Second))
	p := newReader(source("read"), sink("store"))
	q := newReader(source("read"), sink("store"))
	q.set(func(st *observer.Stats) { st.Pipeline = "other" })
	require.NoError(t, h.rep.UseStats(p))
	require.NoError(t, h.rep.UseStats(q))
	ev := func(pl, id, n string) observer.NodeEvent {
		return observer.NodeEvent{Event: observer.Event{Pipeline: pl, RunID: id, Node: n}}
	}
	// Run 1 of orders, then an hour with no run: the Reporter stops ticking.
	p.startRun("run-1")
	h.rep.OnNodeStarted(ev("orders", "run-1", "read"))
	h.rep.OnNodeStarted(ev("orders", "run-1", "store"))
	h.waitTicker()
	p.set(func(st *observer.Stats) { st.Nodes[0].Out, st.Nodes[1].In = 10, 10 })
	h.tick()
	p.set(func(st *observer.Stats) { st.Running = false })
	h.rep.OnNodeCompleted(ev("orders", "run-1", "read"))
	h.rep.OnNodeCompleted(ev("orders", "run-1", "store"))
	h.out.take()
	// The loop ends with the run (no Start), its ticker stopped.
	select {
	case <-h.rep.LoopDone():
	case <-time.After(10 * time.Second):
		t.Fatal("the Reporter still ticks after the run")
	}
	h.clock.Advance(time.Hour)

	// Both start again: other's event starts the ticking, whose first tick
	// sees orders' run 2 before its first node event.
	p.startRun("run-2")
	q.startRun("run-x")
	h.rep.OnNodeStarted(ev("other", "run-x", "read"))
	h.rep.OnNodeStarted(ev("other", "run-x", "store"))
	h.waitTicker()
	h.tick()
	h.out.take()
	h.rep.OnNodeStarted(ev("orders", "run-2", "read"))
	h.rep.OnNodeStarted(ev("orders", "run-2", "store"))
	p.set(func(st *observer.Stats) { st.Nodes[0].Out = 15 })
	h.tick()
	w := h.out.take()
	require.NotEmpty(t, w)
	var line string
	for _, l := range strings.Split(w[len(w)-1], "\n") {
		if strings.Contains(l, "orders") {
			line = l
		}
	}
	require.NotEmpty(t, line)
	assert.NotContains(t, line, "1h0", "run 2 of orders began a tick ago, not an hour ago: %q", line)
	assert.Contains(t, line, "read 5 (", "run 2 read five: %q", line)
}
