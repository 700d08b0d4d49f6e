package connectortest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/Shopify/toxiproxy/v2/toxics"

	"github.com/sluicehq/sluice/node"
)

// ChaosEnv, set to 1, makes [Run] run every case of the fault mode (make
// chaos); without it Run runs a short subset that FaultSeedEnv picks.
const ChaosEnv = "SLUICE_CHAOS"

// FaultSeedEnv picks the subset of the fault mode's cases that [Run] runs
// when ChaosEnv is not set: a number; DefaultFaultSeed without it. The
// seed is in the test log, so that a failing subset can be run again.
const FaultSeedEnv = "SLUICE_FAULT_SEED"

// DefaultFaultSeed picks the fault mode's subset when FaultSeedEnv is not
// set, so that a plain test run always runs the same cases.
const DefaultFaultSeed = 1

// DefaultDeadLinkBound is how soon a source must notice a connection gone
// silent when its harness does not say ([DeadLinkBounder]).
const DefaultDeadLinkBound = time.Minute

// A PublisherVia is a harness whose publisher can dial an address of the
// suite's choosing, a proxy, instead of the broker's: the fault mode runs
// its publisher cases only for a harness that implements it, and says in
// the test log that it skipped them for one that does not.
type PublisherVia interface {
	// NewPublisherVia is NewPublisher, with a publisher that connects to
	// addr (a host:port) instead of the broker's address.
	NewPublisherVia(queue, addr string) (node.Sink[Message], error)
}

// A DeadLinkBounder is a harness that says how soon its connector notices
// a connection that went silent (a half-open link: no RST, no FIN, no
// bytes): the bound its documentation gives, from its heartbeat. The fault
// mode's timeout cases fail a connector that takes longer.
type DeadLinkBounder interface {
	// DeadLinkBound returns the longest a source or a publisher may take
	// to give up a silent connection.
	DeadLinkBound() time.Duration
}

// A SessionSizer is a harness whose connector opens several connections
// for one session with its broker (franz-go opens one per kind of
// request: metadata, fetch, group, produce): the fault mode counts the
// sessions a fault made it give up as the connections it opened again
// (those that carried bytes both ways) taken that many at a time, and
// allows a prefetch of duplicates (a publisher's writes in flight) for
// each. Without it each connection is a session of its own; either way
// the count is no more than the node restarts and retries (and a
// publisher's item retries) the engine saw, when it saw any.
type SessionSizer interface {
	// ConnectionsPerSession returns how many connections the connector
	// opens, at most, for one session.
	ConnectionsPerSession() int
}

// A fault is what the fault mode does to the connections between a
// connector and its broker, in the middle of a run.
type fault struct {
	name string
	// up and down return the toxics of each direction (client to broker,
	// broker to client), nil for none.
	up, down func() toxics.Toxic
	// fresh applies the toxics to the connections opened while the fault
	// lasts too, not only to those open when it starts.
	fresh bool
	// lasts is how long the fault lasts; 0 makes it last until the
	// connector gave up a connection (a node restart, or a second
	// connection through the proxy), within the dead-link bound for
	// silent, or linkBound for loud.
	lasts  time.Duration
	silent bool
	// cuts says the fault may end connections, so that messages in flight
	// may come twice (at-least-once); a fault that does not must cost no
	// duplicate and no reconnection.
	cuts bool
}

// linkBound is how soon a connector must give up a connection that was
// reset: at once, give or take a busy machine.
const linkBound = 10 * time.Second

// faults returns the fault mode's faults.
func faults() []fault {
	both := func(t func() toxics.Toxic) (func() toxics.Toxic, func() toxics.Toxic) { return t, t }
	f := func(name string, t func() toxics.Toxic, fresh bool, lasts time.Duration, silent, cuts bool) fault {
		up, down := both(t)
		return fault{name: name, up: up, down: down, fresh: fresh, lasts: lasts, silent: silent, cuts: cuts}
	}
	return []fault{
		// 40 ms ± 30 ms each way, on every connection, for two seconds.
		f("latency", func() toxics.Toxic { return &toxics.LatencyToxic{Latency: 40, Jitter: 30} }, true, 2*time.Second, false, false),
		// 64 KB/s each way, for two seconds.
		f("bandwidth", func() toxics.Toxic { return &toxics.BandwidthToxic{Rate: 64} }, true, 2*time.Second, false, false),
		// Every write cut into pieces of 4 to 20 bytes, 50 µs apart, for
		// two seconds: frames that arrive a few bytes at a time.
		f("slicer", func() toxics.Toxic { return &toxics.SlicerToxic{AverageSize: 12, SizeVariation: 8, Delay: 50} }, true, 2*time.Second, false, false),
		// The connection reset (RST) at its next byte, and every one
		// opened until the connector reconnected once.
		f("reset_peer", func() toxics.Toxic { return &toxics.ResetToxic{} }, true, 0, false, true),
		// The open connection goes silent for good, both ways, without an
		// RST or a FIN: a half-open link, which only a heartbeat notices.
		// New connections are sound.
		f("timeout", func() toxics.Toxic { return &toxics.TimeoutToxic{} }, false, 0, true, true),
		// A partition: nothing passes either way, on every connection,
		// for three seconds; then the held bytes arrive, as TCP would
		// retransmit them.
		f("partition", func() toxics.Toxic { return holdToxic{} }, true, 3*time.Second, false, true),
	}
}

// A faultCase is one case of the fault mode: a fault, against the source
// or the publisher.
type faultCase struct {
	f       fault
	publish bool
}

func (c faultCase) name() string {
	if c.publish {
		return "Fault/" + c.f.name + "/Publish"
	}
	return "Fault/" + c.f.name + "/Consume"
}

// faultCases returns the fault mode's cases that this run runs: all of
// them under ChaosEnv, else the source's on a silent link (the fault a
// connector is likeliest to miss: only its heartbeat notices it) and two
// the seed picks among the others, one of the source's and one of the
// publisher's.
func faultCases() (cases []faultCase, seed uint64, all bool) {
	for _, f := range faults() {
		cases = append(cases, faultCase{f: f}, faultCase{f: f, publish: true})
	}
	if os.Getenv(ChaosEnv) == "1" {
		return cases, 0, true
	}
	seed = DefaultFaultSeed
	if s := os.Getenv(FaultSeedEnv); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			panic(fmt.Sprintf("connectortest: %s=%q is not a number", FaultSeedEnv, s))
		}
		seed = n
	}
	r := rand.New(rand.NewPCG(seed, seed))
	var silent, consume, publish []faultCase
	for _, c := range cases {
		if c.f.silent {
			if !c.publish {
				silent = append(silent, c)
			}
			continue
		}
		if c.publish {
			publish = append(publish, c)
		} else {
			consume = append(consume, c)
		}
	}
	r.Shuffle(len(consume), func(i, j int) { consume[i], consume[j] = consume[j], consume[i] })
	r.Shuffle(len(publish), func(i, j int) { publish[i], publish[j] = publish[j], publish[i] })
	picked := append(slices.Clone(silent), consume[0], publish[0])
	return picked, seed, false
}
