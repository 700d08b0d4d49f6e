package observertest

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// timeout bounds each scripted run, so that an observer that blocks fails
// the test instead of hanging it. The runs wait on fake clocks: a healthy
// run takes milliseconds.
const timeout = time.Minute

// Run checks s.Observer against every scripted pipeline. The pipelines run
// at the same time, each on its own fake clock, in parallel subtests of a
// subtest called "scenarios"; every one of them reports both to
// s.Observer and to a [Counter], through [observer.Multi]. Run checks that
//
//   - every run ends as scripted, which fails if the observer panics (the
//     engine fails a run whose observer panics) or blocks for a minute;
//   - the Counter saw exactly the scripted events, which checks the
//     scenario itself;
//   - when s.Counts is set, the observer saw what the Counter saw, for the
//     kinds of events in s.Events.
//
// Run it with -race: the observer is called from many goroutines at once.
// The pipelines' names start with "observertest-"; counts of other
// pipelines are ignored.
func Run(t *testing.T, s Subject) {
	t.Helper()
	require.NotNil(t, s.Observer, "observertest: Subject.Observer is nil")
	counter := &Counter{}
	want := make(Counts)
	all := scenarios()
	for _, sc := range all {
		for k, v := range sc.want {
			want.Add(k, v)
		}
	}
	t.Run("scenarios", func(t *testing.T) {
		for _, sc := range all {
			t.Run(strings.TrimPrefix(sc.name, prefix), func(t *testing.T) {
				t.Parallel()
				sc.run(t, s, counter)
			})
		}
	})
	if t.Failed() {
		return
	}
	got := ours(counter.Counts())
	if s.Counts == nil {
		return
	}
	seen, err := s.Counts()
	require.NoError(t, err, "observertest: Subject.Counts")
	for _, d := range diff(got.Only(s.Events...), ours(seen).Only(s.Events...)) {
		t.Errorf("observertest: %s: the runs had %d, the observer saw %d", d.key, d.want, d.got)
	}
}

type difference struct {
	key       Key
	want, got int
}

// diff returns the keys whose counts differ, sorted.
func diff(want, got Counts) []difference {
	var out []difference
	for k, w := range want {
		if g := got[k]; g != w {
			out = append(out, difference{k, w, g})
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			out = append(out, difference{k, 0, g})
		}
	}
	slices.SortFunc(out, func(a, b difference) int { return strings.Compare(a.key.String(), b.key.String()) })
	return out
}

// ours returns the counts of the scenarios' pipelines.
func ours(c Counts) Counts {
	out := make(Counts, len(c))
	for k, v := range c {
		if strings.HasPrefix(k.Pipeline, prefix) {
			out.Add(k, v)
		}
	}
	return out
}

func (sc scenario) run(t *testing.T, s Subject, counter *Counter) {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	clock := clockwork.NewFakeClock()
	opts := append([]pipeline.Option{pipeline.WithClock(clock), pipeline.WithObserver(observer.Multi(s.Observer, counter))}, sc.opts...)
	b := pipeline.New(sc.name, opts...)
	sc.nodes(b)
	p, err := b.Build()
	require.NoError(t, err, "observertest: building scenario %s", sc.name)
	run := pipelinetest.Start(ctx, p)
	_, err = pipelinetest.AdvanceUntilDone(ctx, clock, run, sc.step)
	if !run.Finished() {
		cancel()
		_, _ = run.Wait()
		t.Fatalf("observertest: scenario %s did not finish: %v; does the observer block?", sc.name, err)
	}
	if sc.fails {
		require.Error(t, err, "observertest: scenario %s must fail", sc.name)
		assert.NotContains(t, err.Error(), "observer panicked", "observertest: the observer panicked")
	} else {
		require.NoError(t, err, "observertest: scenario %s", sc.name)
	}

	want := maps.Clone(sc.want)
	for _, n := range p.Stats().Nodes {
		want.Add(Key{Event: NodeStarted, Pipeline: sc.name, Node: n.Node}, 1)
		want.Add(Key{Event: NodeCompleted, Pipeline: sc.name, Node: n.Node}, 1)
	}
	got := make(Counts)
	for k, v := range counter.Counts() {
		if k.Pipeline == sc.name {
			got.Add(k, v)
		}
	}
	for _, d := range diff(want, got) {
		t.Errorf("observertest: scenario %s: %s: the script says %d, the engine reported %d", sc.name, d.key, d.want, d.got)
	}
}
