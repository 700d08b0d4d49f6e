package slogobserver_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/slogobserver"
	"github.com/sluicehq/sluice/resilience"
)

// recorder is a handler that keeps the records it is given.
type recorder struct {
	level slog.Level
	added chan struct{} // a token per record, when there is room
	mu    sync.Mutex
	recs  []slog.Record
}

func newRecorder(level slog.Level) *recorder {
	return &recorder{level: level, added: make(chan struct{}, 1)}
}

func (h *recorder) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *recorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	select {
	case h.added <- struct{}{}:
	default:
	}
	return nil
}

func (h *recorder) WithAttrs([]slog.Attr) slog.Handler { panic("not used") }
func (h *recorder) WithGroup(string) slog.Handler      { panic("not used") }

// line is a record with its level, message, attributes and time as
// strings; pipeline and run_id are left out when they are "p" and "r".
type line map[string]string

func (h *recorder) lines() []line {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]line, 0, len(h.recs))
	for _, r := range h.recs {
		l := line{"level": r.Level.String(), "msg": r.Message, "time": r.Time.Sub(start).String()}
		r.Attrs(func(a slog.Attr) bool {
			l[a.Key] = a.Value.String()
			return true
		})
		if l["pipeline"] == "p" && l["run_id"] == "r" {
			delete(l, "pipeline")
			delete(l, "run_id")
		}
		out = append(out, l)
	}
	return out
}

// waitFor waits until the recorder holds n records, which a timer on a
// fake clock writes from a goroutine of its own.
func (h *recorder) waitFor(t *testing.T, n int) []line {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		if l := h.lines(); len(l) >= n {
			return l
		}
		select {
		case <-h.added:
		case <-ctx.Done():
			require.FailNow(t, "records missing", "want %d, have %v", n, h.lines())
		}
	}
}

// quiet returns an observer summing up every 10 s on a fake clock at start.
func quiet(t *testing.T, opts ...slogobserver.Option) (*slogobserver.Observer, *recorder, *clockwork.FakeClock) {
	h := newRecorder(slog.LevelDebug)
	clock := clockwork.NewFakeClockAt(start)
	obs := slogobserver.New(slog.New(h), append([]slogobserver.Option{
		slogobserver.WithSummaryEvery(10 * time.Second), slogobserver.WithClock(clock),
	}, opts...)...)
	t.Cleanup(func() { _ = obs.Close() })
	return obs, h, clock
}

func ev(node string, at time.Duration) observer.Event {
	return observer.Event{Pipeline: "p", RunID: "r", Node: node, Time: start.Add(at)}
}

func deadLetter(node, key string, err error, at time.Duration) observer.DeadLetterEvent {
	return observer.DeadLetterEvent{Event: ev(node, at), Key: key, OriginNode: node, Attempts: 4, Err: err}
}

func drop(node, key string, err error, at time.Duration) observer.DropEvent {
	return observer.DropEvent{Event: ev(node, at), Key: key, Attempts: 1, Err: err}
}

func orderErr(id int) error { return fmt.Errorf("order %d: HTTP 400", id) }

func TestTheFirstOfAReasonIsLoggedAtOnce(t *testing.T) {
	t.Parallel()
	obs, h, _ := quiet(t)
	obs.OnDeadLetter(deadLetter("price", "order 7", orderErr(7), 0))
	assert.Equal(t, []line{{
		"level": "WARN", "msg": slogobserver.MsgDeadLettered, "time": "0s", "node": "price", "key": "order 7",
		"origin_node": "price", "attempts": "4", "error": "order 7: HTTP 400", "reason": "order #: HTTP #",
	}}, h.lines())
}

func TestRepeatsAreSummedUpOncePerInterval(t *testing.T) {
	t.Parallel()
	obs, h, clock := quiet(t)
	for i := range 38 {
		obs.OnDeadLetter(deadLetter("price", "order "+strconv.Itoa(100+i), orderErr(100+i), time.Duration(i)*time.Millisecond))
	}
	require.Len(t, h.lines(), 1, "the first at once, the others counted")

	clock.Advance(10 * time.Second)
	got := h.waitFor(t, 2)
	assert.Equal(t, line{
		"level": "WARN", "msg": slogobserver.MsgDeadLetters, "time": "37ms", "node": "price", "origin_node": "price",
		"count": "37", "reason": "order #: HTTP #", "last_key": "order 137", "last_error": "order 137: HTTP 400",
	}, got[1], "the summary has the time of the last event it counts")

	// The reason goes on: one summary an interval, no first line again.
	clock.Advance(time.Second)
	for i := range 5 {
		obs.OnDeadLetter(deadLetter("price", "order "+strconv.Itoa(200+i), orderErr(200+i), 11*time.Second))
	}
	require.Len(t, h.lines(), 2)
	clock.Advance(9 * time.Second)
	got = h.waitFor(t, 3)
	assert.Equal(t, "5", got[2]["count"])
	assert.Equal(t, slogobserver.MsgDeadLetters, got[2]["msg"])

	// Quiet for an interval, it is logged at once again.
	clock.Advance(30 * time.Second)
	obs.OnDeadLetter(deadLetter("price", "order 300", orderErr(300), 50*time.Second))
	got = h.lines()
	require.Len(t, got, 4)
	assert.Equal(t, slogobserver.MsgDeadLettered, got[3]["msg"])
	assert.Equal(t, "order 300", got[3]["key"])
}

func TestAnEventAfterTheIntervalWritesItsSummary(t *testing.T) {
	t.Parallel()
	obs, h, clock := quiet(t)
	obs.OnDrop(drop("check", "a", errBad, 0))
	obs.OnDrop(drop("check", "b", errBad, time.Second))
	// The clock jumps past the interval's end and the timer: the next
	// event ends the interval without waiting for it.
	clock.Advance(15 * time.Second)
	obs.OnDrop(drop("check", "c", errBad, 15*time.Second))
	got := h.waitFor(t, 2)
	assert.Equal(t, slogobserver.MsgDrops, got[1]["msg"])
	assert.Equal(t, "1", got[1]["count"])
	assert.Equal(t, "b", got[1]["last_key"])
	obs.Flush()
	got = h.lines()
	require.Len(t, got, 3, "c is counted in the new interval")
	assert.Equal(t, line{
		"level": "WARN", "msg": slogobserver.MsgDrops, "time": "15s", "node": "check",
		"count": "1", "reason": "bad item", "last_key": "c", "last_error": "bad item",
	}, got[2])
}

func TestGroupsDifferByNodeKindAndReason(t *testing.T) {
	t.Parallel()
	obs, h, _ := quiet(t)
	timeout := errors.New("price: timeout")
	other := observer.DeadLetterEvent{Event: observer.Event{Pipeline: "p", RunID: "r2", Node: "price"}, OriginNode: "price", Err: timeout}
	for range 3 {
		obs.OnDeadLetter(deadLetter("price", "", orderErr(1), 0))
		obs.OnDeadLetter(deadLetter("price", "", timeout, 0))
		obs.OnDeadLetter(deadLetter("ship", "", timeout, 0))
		obs.OnDrop(drop("price", "", timeout, 0))
		obs.OnDeadLetter(other)
	}
	require.Len(t, h.lines(), 5, "one first line each")
	obs.Flush()
	type summary struct{ run, node, msg, reason, count string }
	var got []summary
	for _, l := range h.lines()[5:] {
		got = append(got, summary{l["run_id"], l["node"], l["msg"], l["reason"], l["count"]})
	}
	assert.Equal(t, []summary{
		{"", "price", slogobserver.MsgDeadLetters, "order #: HTTP #", "2"},
		{"", "price", slogobserver.MsgDeadLetters, "price: timeout", "2"},
		{"", "price", slogobserver.MsgDrops, "price: timeout", "2"},
		{"", "ship", slogobserver.MsgDeadLetters, "price: timeout", "2"},
		{"r2", "price", slogobserver.MsgDeadLetters, "price: timeout", "2"},
	}, got, "in order of pipeline, run, node, message and reason")
}

func TestACompletedNodeWritesItsSummaries(t *testing.T) {
	t.Parallel()
	obs, h, _ := quiet(t)
	obs.OnNodeStarted(observer.NodeEvent{Event: ev("price", 0)})
	obs.OnNodeStarted(observer.NodeEvent{Event: ev("ship", 0)})
	for i := range 3 {
		obs.OnDrop(drop("price", "", errBad, time.Duration(i)*time.Second))
		obs.OnDrop(drop("ship", "", errBad, time.Duration(i)*time.Second))
	}
	obs.OnNodeCompleted(observer.NodeEvent{Event: ev("price", 5*time.Second)})
	msgs := func() (out []string) {
		for _, l := range h.lines() {
			out = append(out, l["node"]+" "+l["msg"]+" "+l["count"])
		}
		return out
	}
	assert.Equal(t, []string{
		"price node started ", "ship node started ", "price item dropped ", "ship item dropped ",
		"price drops 2", "price node completed ",
	}, msgs(), "the summary comes before its node's completion, the other node's waits")
	obs.OnNodeCompleted(observer.NodeEvent{Event: ev("ship", 5*time.Second), Err: errBad})
	assert.Equal(t, []string{"ship drops 2", "ship node failed "}, msgs()[6:], "the run's last node completes: nothing is left")
}

func TestEveryEventWithoutSummaries(t *testing.T) {
	t.Parallel()
	obs, h, _ := quiet(t, slogobserver.WithSummaryEvery(0))
	for i := range 3 {
		obs.OnDrop(drop("check", "k"+strconv.Itoa(i), errBad, 0))
	}
	obs.Flush()
	assert.Equal(t, []line{
		{"level": "WARN", "msg": slogobserver.MsgDropped, "time": "0s", "node": "check", "key": "k0", "attempts": "1", "error": "bad item"},
		{"level": "WARN", "msg": slogobserver.MsgDropped, "time": "0s", "node": "check", "key": "k1", "attempts": "1", "error": "bad item"},
		{"level": "WARN", "msg": slogobserver.MsgDropped, "time": "0s", "node": "check", "key": "k2", "attempts": "1", "error": "bad item"},
	}, h.lines(), "no reason: nothing to match it with")
}

func TestCloseWritesTheSummariesThenLogsEveryEvent(t *testing.T) {
	t.Parallel()
	obs, h, _ := quiet(t)
	for range 3 {
		obs.OnDrop(drop("check", "", errBad, 0))
	}
	require.NoError(t, obs.Close())
	got := h.lines()
	require.Len(t, got, 2)
	assert.Equal(t, "2", got[1]["count"])
	obs.OnDrop(drop("check", "", errBad, 0))
	obs.OnDrop(drop("check", "", errBad, 0))
	assert.Len(t, h.lines(), 4)
	obs.Flush()
	assert.Len(t, h.lines(), 4)
}

func TestRetriesExhaustedOfItemsAreSummedUp(t *testing.T) {
	t.Parallel()
	obs, h, _ := quiet(t)
	item := observer.RetryExhaustedEvent{Event: ev("price", 0), Key: "k", Kind: resilience.ItemRetry, Attempts: 4, Err: errFlaky}
	node := observer.RetryExhaustedEvent{Event: ev("price", 0), Kind: resilience.NodeRestart, Attempts: 2, Err: errFlaky}
	budget := item
	budget.Limit = resilience.LimitBudget
	for range 3 {
		obs.OnRetryExhausted(item)
		obs.OnRetryExhausted(node)
		obs.OnRetryExhausted(budget)
	}
	obs.Flush()
	var got []string
	for _, l := range h.lines() {
		got = append(got, fmt.Sprintf("%s %s %s %s %s", l["msg"], l["kind"], l["limit"], l["count"], l["reason"]))
	}
	assert.Equal(t, []string{
		"retries exhausted item_retry count  flaky",
		"retries exhausted node_restart count  ",
		"retries exhausted item_retry budget  flaky",
		"retries exhausted node_restart count  ",
		"retries exhausted node_restart count  ",
		"exhausted item retries item_retry budget 2 flaky",
		"exhausted item retries item_retry count 2 flaky",
	}, got, "a node's own retries are logged one by one; the limit tells groups apart")
	assert.Equal(t, "k", h.lines()[6]["last_key"])
}

func TestReasonsBeyondTheMostAreCountedTogether(t *testing.T) {
	t.Parallel()
	obs, h, _ := quiet(t)
	for i := range slogobserver.MaxReasons + 3 {
		for range 2 {
			obs.OnDrop(drop("check", "", errors.New("bad field "+string(rune('a'+i))), 0))
		}
	}
	got := h.lines()
	require.Len(t, got, slogobserver.MaxReasons+1)
	assert.Equal(t, slogobserver.OtherReasons, got[slogobserver.MaxReasons]["reason"])
	assert.Equal(t, "bad field a", got[0]["reason"])
	obs.Flush()
	got = h.lines()[slogobserver.MaxReasons+1:]
	require.Len(t, got, slogobserver.MaxReasons+1)
	other := got[0] // "(" sorts first
	assert.Equal(t, slogobserver.OtherReasons, other["reason"])
	assert.Equal(t, "5", other["count"], "3 reasons twice, less the first, logged")
	assert.Equal(t, "bad field w", other["last_error"])
}

func TestBelowWarnNothingIsCounted(t *testing.T) {
	t.Parallel()
	h := newRecorder(slog.LevelError)
	obs := slogobserver.New(slog.New(h), slogobserver.WithClock(clockwork.NewFakeClock()))
	for range 3 {
		obs.OnDrop(drop("check", "", errBad, 0))
		obs.OnRetry(observer.RetryEvent{Event: ev("check", 0), Err: errFlaky})
	}
	obs.Flush()
	require.NoError(t, obs.Close())
	assert.Empty(t, h.lines())
}

func TestTheKeyOfARetry(t *testing.T) {
	t.Parallel()
	obs, h, _ := quiet(t)
	obs.OnRetry(observer.RetryEvent{Event: ev("price", 0), Key: "order 7", Kind: resilience.ItemRetry, Attempt: 1, Delay: time.Second, Err: errFlaky})
	assert.Equal(t, []line{{
		"level": "DEBUG", "msg": slogobserver.MsgRetry, "time": "0s", "node": "price", "key": "order 7",
		"kind": "item_retry", "attempt": "1", "delay": "1s", "error": "flaky",
	}}, h.lines())
}

// Events from many goroutines, while the clock moves and intervals end:
// every event is in exactly one record, once logged or in a count.
func TestConcurrentEventsAddUp(t *testing.T) {
	t.Parallel()
	obs, h, clock := quiet(t)
	const workers, each = 8, 500
	reasons := []error{errBad, errFlaky, orderErr(1)}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				e := drop("node"+strconv.Itoa(w%2), "", reasons[i%len(reasons)], 0)
				if i%2 == 0 {
					obs.OnDrop(e)
				} else {
					obs.OnDeadLetter(observer.DeadLetterEvent{Event: e.Event, OriginNode: e.Node, Err: e.Err})
				}
			}
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 50 {
			clock.Advance(3 * time.Second)
			obs.Flush()
		}
	}()
	wg.Wait()
	<-done
	require.NoError(t, obs.Close())
	total := 0
	for _, l := range h.lines() {
		switch l["msg"] {
		case slogobserver.MsgDropped, slogobserver.MsgDeadLettered:
			total++
		case slogobserver.MsgDrops, slogobserver.MsgDeadLetters:
			n, err := strconv.Atoi(l["count"])
			require.NoError(t, err)
			require.Positive(t, n)
			total += n
		default:
			t.Fatalf("unexpected record %v", l)
		}
	}
	assert.Equal(t, workers*each, total)
}
