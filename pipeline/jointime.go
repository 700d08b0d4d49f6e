package pipeline

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"
)

// JoinEventTime makes a [Join] match on the items' own times, atL(l) and
// atR(r), instead of their arrival on the pipeline's clock: a left and a
// right item with equal keys join when their event times are less than
// within apart, in whatever order and however far apart on the clock
// they come.
//
// Each input has a watermark, the latest event time it brought less
// maxLateness (bounded out-of-orderness), and the node's watermark is the
// lower of the two: an input that is behind, or has brought nothing yet,
// holds it back. An item waits for partners until the watermark passes
// its event time by within (expiry follows the watermark, not the
// clock), and at the end of input. There is no idle timeout: while one
// input brings nothing, every item of the other waits, and under
// WithCheckpoint holds its position, until the quiet input brings an
// item or the input ends. An item older than the watermark is
// late, as in an [EventTime] Aggregate: its partners may have been let
// go. It is counted in NodeStats.Late and goes to the node's failure
// action with a [LateError] (the first failure rule that matches it, else
// DeadLetter), so Build needs a dead-letter sink.
//
// Build rejects JoinEventTime on a node other than a Join, a nil time
// function, a negative maxLateness, and L or R that are not the Join's
// item types. [Late] and [AllowedLateness] are an Aggregate's alone.
func JoinEventTime[L, R any](atL func(L) time.Time, atR func(R) time.Time, maxLateness time.Duration) NodeOption {
	return func(c *nodeConfig) {
		c.joinTime = &joinTimeConfig{atL: atL, atR: atR, nilAt: atL == nil || atR == nil,
			left: reflect.TypeFor[L](), right: reflect.TypeFor[R](), maxLateness: maxLateness}
	}
}

// joinTimeConfig is the JoinEventTime option.
type joinTimeConfig struct {
	atL, atR    any // func(L) time.Time, func(R) time.Time
	nilAt       bool
	left, right reflect.Type
	maxLateness time.Duration
}

// checkJoinTime returns the Build errors of a Join's JoinEventTime option.
func checkJoinTime[L, R any](c nodeConfig) []error {
	jt := c.joinTime
	if jt == nil {
		return nil
	}
	var errs []error
	switch {
	case jt.nilAt:
		errs = append(errs, errors.New("JoinEventTime: a time function is nil"))
	case jt.left != reflect.TypeFor[L]() || jt.right != reflect.TypeFor[R]():
		errs = append(errs, fmt.Errorf("JoinEventTime: the time functions take %s and %s, and the join's items are %s and %s",
			jt.left, jt.right, reflect.TypeFor[L](), reflect.TypeFor[R]()))
	}
	if jt.maxLateness < 0 {
		errs = append(errs, fmt.Errorf("JoinEventTime: maxLateness %s: must not be negative", jt.maxLateness))
	}
	return errs
}

// checkJoinTimeKind returns the Build errors of JoinEventTime on node n:
// on a node other than a Join, and on a Join of a pipeline without a
// dead-letter sink, which late items need.
func checkJoinTimeKind(cfg config, n *spec) []error {
	if n.cfg.joinTime == nil {
		return nil
	}
	if n.kind != KindJoin {
		return []error{fmt.Errorf("JoinEventTime: only a Join matches on event time, not a %s", n.kind)}
	}
	if cfg.deadLetter == nil {
		return []error{errors.New("JoinEventTime: late items are dead-lettered, and the pipeline has no dead-letter sink (WithDeadLetter)")}
	}
	return nil
}

// joinWatermark is a Join's event time: each input's latest event time
// less maxLateness; the join's watermark is the lower of the two.
type joinWatermark[L, R any] struct {
	atL         func(L) time.Time
	atR         func(R) time.Time
	maxLateness time.Duration
	// seen and latest are per input: [0] left, [1] right.
	seen   [2]bool
	latest [2]time.Time
}

func sideOf(left bool) int {
	if left {
		return 0
	}
	return 1
}

// take returns the event time of e and lets it move its input's
// watermark.
func (w *joinWatermark[L, R]) take(e either[L, R]) time.Time {
	var t time.Time
	if e.left {
		t = w.atL(e.l)
	} else {
		t = w.atR(e.r)
	}
	s := sideOf(e.left)
	if !w.seen[s] || t.After(w.latest[s]) {
		w.latest[s] = t
	}
	w.seen[s] = true
	return t
}

// mark returns the join's watermark; ok is false while an input has
// brought nothing, which holds every item.
func (w *joinWatermark[L, R]) mark() (wm time.Time, ok bool) {
	if !w.seen[0] || !w.seen[1] {
		return time.Time{}, false
	}
	l, r := w.latest[0], w.latest[1]
	if r.Before(l) {
		l = r
	}
	return l.Add(-w.maxLateness), true
}

// lateJoin fails a late item of a join: it is counted, and goes to the
// node's failure action.
func (j *joiner[L, R, K, Out]) lateJoin(ctx context.Context, env envelope[either[L, R]], t, wm time.Time) error {
	var item any = env.val.r
	if env.val.left {
		item = env.val.l
	}
	n := j.nr.spec
	n.stats.late.Add(1)
	now := j.clock.Now()
	fl := &failure{err: &LateError{EventTime: t, Watermark: wm}, first: now, last: now, late: true}
	if err := j.nr.itemFailed(ctx, item, env.tr, fl); err != nil {
		if errors.Is(err, ErrLate) {
			return &notRestartable{err}
		}
		return err
	}
	return nil
}
