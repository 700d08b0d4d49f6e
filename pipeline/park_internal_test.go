package pipeline

import (
	"runtime"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// A full parking says so until one of its items wakes, and an item about
// to park waits for that room: the intake of a Parallel node waits on
// the same signal. The wait for room counts in the item's wait: one
// whose wait ended meanwhile wakes as soon as it parks.
func TestParkingFullUntilAnItemWakes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := clockwork.NewFakeClock()
	pk := newParking[int](clock, 2, nil)
	if pk.full() != nil {
		t.Fatal("an empty parking says it is full")
	}
	for i, d := range []time.Duration{time.Hour, 2 * time.Hour} {
		if err := pk.park(ctx, i, clock.Now().Add(d), nil); err != nil {
			t.Fatal(err)
		}
	}
	room := pk.full()
	if room == nil {
		t.Fatal("a parking with MaxParked items says it has room")
	}
	third := make(chan error, 1)
	until := clock.Now().Add(30 * time.Minute)
	late := time.Duration(-1)
	go func() { third <- pk.park(ctx, 2, until, &late) }()
	select {
	case <-room:
		t.Fatal("room before any item woke")
	case err := <-third:
		t.Fatalf("a third item parked past the cap: %v", err)
	default:
	}
	if err := clock.BlockUntilContext(ctx, 2); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	select {
	case <-room:
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if err := <-third; err != nil {
		t.Fatal(err)
	}
	if v, ok := pk.take(); !ok || v != 0 {
		t.Fatalf("took %v, %v; want the item that woke, 0", v, ok)
	}
	// The third item's wait ended while it waited for room: it wakes
	// with the clock standing still, its timer not late.
	for {
		v, ok := pk.take()
		if ok {
			if v != 2 {
				t.Fatalf("took %v; want the third item, 2", v)
			}
			break
		}
		select {
		case <-pk.signal:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	if late != 0 {
		t.Fatalf("the third item's timer fired %v late on a clock standing still", late)
	}
	if left := pk.close(); len(left) != 1 || left[0] != 1 {
		t.Fatalf("close returned %v; want the item still parked, 1", left)
	}
}

// A drain whose recall takes back none of the parked items (the broker
// cannot take them) still lets an item that waits for room go back at
// once when the broker can take it: the wait for room ends with the
// recall, not at the first parked item's timer.
func TestParkingRecallWakesAWaitForRoom(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := clockwork.NewFakeClock()
	pk := newParking[int](clock, 1, nil)
	if err := pk.park(ctx, 0, clock.Now().Add(time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() { second <- pk.park(ctx, 1, clock.Now().Add(time.Hour), nil) }()
	// The second item waits for room; give it every chance to get there
	// before the recall (a recall before it waits is the other path, and
	// must pass too).
	for range 100 {
		runtime.Gosched()
	}
	pk.recall(func(v int) bool { return v == 1 })
	select {
	case err := <-second:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the item waiting for room still waits after a recall that would take it back")
	}
	if v, ok := pk.take(); !ok || v != 1 {
		t.Fatalf("took %v, %v; want the item that goes back, 1", v, ok)
	}
	pk.leave()
	if left := pk.close(); len(left) != 1 || left[0] != 0 {
		t.Fatalf("close returned %v; want the item still parked, 0", left)
	}
}
