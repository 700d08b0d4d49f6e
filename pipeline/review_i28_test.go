package pipeline_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// reviewGate fails the first call of every item in waits with wait(time.Hour);
// the first call of item held blocks until open is closed (entered is
// closed when it started), and the first calls of the other items wait
// until it started, so that each item was taken before any parks. Every
// other call succeeds.
type reviewGate struct {
	held    int
	waits   map[int]bool
	entered chan struct{}
	open    chan struct{}
	mu      sync.Mutex
	calls   map[int]int
}

func (g *reviewGate) Process(_ context.Context, d delivery) (delivery, error) {
	g.mu.Lock()
	g.calls[d.id]++
	n := g.calls[d.id]
	g.mu.Unlock()
	if n > 1 {
		return d, nil
	}
	if d.id == g.held {
		close(g.entered)
		<-g.open
	} else {
		<-g.entered
	}
	if g.waits[d.id] {
		return d, wait(time.Hour)
	}
	return d, nil
}

func (g *reviewGate) callsOf(id int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[id]
}

// awaitGoroutine waits, on the real clock, until some goroutine's stack
// shows state and holds every one of frames: the moment a goroutine
// blocks where the test needs it, which no channel of the engine shows.
func awaitGoroutine(t *testing.T, state string, frames ...string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		n := runtime.Stack(buf, true)
	next:
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			header, _, _ := strings.Cut(g, "\n")
			if !strings.Contains(header, state) {
				continue
			}
			for _, f := range frames {
				if !strings.Contains(g, f) {
					continue next
				}
			}
			return
		}
		runtime.Gosched()
	}
	t.Fatalf("no goroutine in state %q with frames %q", state, frames)
}

// Finding 1: an item that waits for room in a full parking (MaxParked)
// when the drain starts is not handed back. The drain's recall takes the
// parked items out, which makes room; the waiting item then parks for its
// whole wait (park checks pk.back only before its wait for room), and the
// drain waits that hour, though Drain's doc says every item that parks
// while the run drains goes back at once.
func TestReviewDrainHandsBackAnItemWaitingForRoomInAFullParking(t *testing.T) {
	for _, v := range []struct {
		name string
		opts []pipeline.NodeOption
	}{
		{"unordered", []pipeline.NodeOption{pipeline.Parallel(2), pipeline.Unordered(), pipeline.MaxParked(1)}},
		{"ordered", []pipeline.NodeOption{pipeline.Parallel(2), pipeline.MaxParked(1)}},
	} {
		t.Run(v.name, func(t *testing.T) {
			clock := clockwork.NewFakeClock()
			br := newSimBroker(2*time.Hour, 1, 2)
			g := &reviewGate{held: 2, waits: map[int]bool{1: true, 2: true},
				entered: make(chan struct{}), open: make(chan struct{}), calls: map[int]int{}}
			col := &pipelinetest.Collector[delivery]{}
			p := drainParkPipeline(clock, &pipelinetest.Recorder{}, br, g, col, v.opts...)
			start := clock.Now()
			run := pipelinetest.Start(t.Context(), p)
			await(t, g.entered, "item 2's first call")
			require.NoError(t, clock.BlockUntilContext(t.Context(), 1), "item 1 parks")
			close(g.open)
			// Item 2 asks for its hour, and waits for room: item 1 fills
			// the parking.
			awaitGoroutine(t, "[select", "pipeline.(*parking[...]).park(")
			require.True(t, p.Drain())

			tctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			parked := make(chan error, 1)
			go func() { parked <- clock.BlockUntilContext(tctx, 1) }()
			select {
			case <-run.Done():
			case err := <-parked:
				if err == nil {
					t.Errorf("item 2 parked for its hour while the run drains, and holds the drain")
					clock.Advance(time.Hour)
				}
			case <-time.After(time.Minute):
				t.Fatal("the run did not end")
			}
			_, err := waitRun(t, run, v.name)
			require.NoError(t, err)
			cancel()
			assert.Equal(t, start, clock.Now(), "the drain waited for no wait")
			br.mu.Lock()
			defer br.mu.Unlock()
			assert.Equal(t, []node.Outcome{node.HandedOff}, br.outcomes[1])
			assert.Equal(t, []node.Outcome{node.HandedOff}, br.outcomes[2], "item 2 parked during the drain")
			assert.Equal(t, 1, g.callsOf(2))
		})
	}
}
