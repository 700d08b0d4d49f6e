package main

import (
	"math/rand/v2"
	"time"
)

// The kinds of fault the soak applies.
const (
	faultLatency   = "latency"    // 40 ms ± 30 ms each way, every connection
	faultBandwidth = "bandwidth"  // 64 KB/s each way, every connection
	faultTimeout   = "timeout"    // the open connections go silent (half-open), new ones are sound
	faultReset     = "reset_peer" // every open connection cut (RST)
	faultPartition = "partition"  // nothing passes either way, then the held bytes do
	faultKill      = "kill"       // the child consumer SIGKILLed, then started again
)

var faultKinds = []string{faultLatency, faultBandwidth, faultTimeout, faultReset, faultPartition, faultKill}

// An event is one fault of the schedule: it starts at At (since the start
// of the run) and lasts Lasts.
type event struct {
	At    time.Duration
	Kind  string
	Lasts time.Duration
}

// schedule returns the faults of a run of d, from seed: one every gap to
// 3×gap, each lasting 1 to 5 seconds, none starting in the last quarter
// of the run, so that the end of the run is quiet and the pipelines drain.
// The same seed gives the same schedule.
func schedule(seed uint64, d, gap time.Duration) []event {
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	var out []event
	end := d * 3 / 4
	if gap <= 0 {
		return nil
	}
	at := gap
	for at < end {
		e := event{At: at, Kind: faultKinds[r.IntN(len(faultKinds))], Lasts: time.Second + time.Duration(r.Int64N(int64(4*time.Second)))}
		out = append(out, e)
		at += e.Lasts + gap + time.Duration(r.Int64N(int64(2*gap)))
	}
	return out
}
