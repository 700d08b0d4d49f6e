package main

import (
	"math/rand/v2"
	"time"

	"github.com/sluicehq/sluice/connector/connectortest"
)

// The kinds of fault the soak applies. All but kill are the Proxy's, on
// every connection (the open ones and those opened while the fault
// lasts), each way, until Clear lifts them.
const (
	faultLatency   = "latency"    // 40 ms ± 30 ms each way
	faultBandwidth = "bandwidth"  // 64 KB/s each way
	faultTimeout   = "timeout"    // every connection silent (half-open); Clear closes them
	faultReset     = "reset_peer" // every connection reset (RST) at its next byte
	faultPartition = "partition"  // nothing passes either way; Clear delivers the held bytes
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

// injectFault applies the network fault kind (any kind but kill) to
// every connection through px, until px.Clear.
func injectFault(px *connectortest.Proxy, kind string) {
	switch kind {
	case faultLatency:
		px.Latency(40*time.Millisecond, 30*time.Millisecond)
	case faultBandwidth:
		px.Bandwidth(64)
	case faultTimeout:
		px.Silence()
	case faultReset:
		px.Reset()
	case faultPartition:
		px.Partition()
	default:
		panic("soak: no network fault " + kind)
	}
}
