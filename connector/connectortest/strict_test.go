package connectortest_test

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/connector/connectortest"
	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/servicetest"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

func TestMain(m *testing.M) {
	// The consumer processes of the SIGKILL and crash cases are this
	// binary, with the connector of the variant under test.
	connectortest.ChildMain(childRabbit())
	goleak.VerifyTestMain(m)
}

// brokenEnv, when set, lets TestBroken run the suite against the broken
// connectors: only in the process TestSuiteFailsBrokenConnectors starts.
// variantEnv names the variant that process runs, for its consumer
// processes.
const (
	brokenEnv  = "SLUICE_CONNECTORTEST_BROKEN"
	variantEnv = "SLUICE_CONNECTORTEST_VARIANT"
)

// childRabbit is the harness of a consumer process: the sound one, with
// the fault of the variant that variantEnv names, if any.
func childRabbit() connectortest.Harness[rabbitmq.Message] {
	h := newRabbit(rabbitURL())
	for _, v := range variants {
		if v.name == os.Getenv(variantEnv) {
			h.source = v.source
			return broken{h, v}
		}
	}
	return h
}

// rabbitURL is the broker's URL, as servicetest finds it.
func rabbitURL() string {
	if u := os.Getenv(servicetest.RabbitMQEnv); u != "" {
		return u
	}
	return servicetest.DefaultRabbitMQURL
}

// A variant is the sound RabbitMQ connector with one fault, and the case
// of the suite that must catch it, by the words of its failure.
type variant struct {
	name, catches, says string
	// source changes the source's config; wrap the source it built;
	// publisher the publisher.
	source    func(*rabbitmq.SourceConfig)
	wrap      func(node.Emitter[rabbitmq.Message]) node.Emitter[rabbitmq.Message]
	publisher func(node.Sink[connectortest.Message]) node.Sink[connectortest.Message]
	// deadLetter comes between the pipeline and the source's DeadLetter.
	deadLetter func(next deadletter.Sink) deadletter.Sink
}

var variants = []variant{
	{
		name: "acks_on_receipt", catches: "CancelPutsBackTheRest", says: "what was not stored is back in the queue",
		wrap: func(out node.Emitter[rabbitmq.Message]) node.Emitter[rabbitmq.Message] {
			return emitter{out, func(ctx context.Context, m rabbitmq.Message, done func(node.Outcome)) error {
				done(node.Delivered) // acked before the pipeline saw it
				return out.Emit(ctx, m)
			}}
		},
	},
	{
		name: "requeues_what_it_processed", catches: "DrainFinishesAndAcks", says: "nothing left unacked",
		wrap: func(out node.Emitter[rabbitmq.Message]) node.Emitter[rabbitmq.Message] {
			return emitter{out, func(ctx context.Context, m rabbitmq.Message, done func(node.Outcome)) error {
				return out.EmitTracked(ctx, m, func(node.Outcome) { done(node.Failed) }) // every outcome put back
			}}
		},
	},
	{
		// Each good message handed to the pipeline twice, the first time
		// untracked: an idempotent store keeps it once, so only the
		// count of deliveries shows it.
		name: "delivers_twice", catches: "PoisonStormEachMessageEndsOnce", says: "good messages are delivered again only as a failed run or a crash",
		wrap: func(out node.Emitter[rabbitmq.Message]) node.Emitter[rabbitmq.Message] {
			return emitter{out, func(ctx context.Context, m rabbitmq.Message, done func(node.Outcome)) error {
				if strings.HasPrefix(m.MessageID, "m-") {
					if err := out.Emit(ctx, m); err != nil {
						return err
					}
				}
				return out.EmitTracked(ctx, m, done)
			}}
		},
	},
	{
		name: "retries_too_soon", catches: "BrokerRetryAfterItsDelay", says: "not before the delay",
		source: func(c *rabbitmq.SourceConfig) { c.Retry.Delay /= 4 },
	},
	{
		// 4.8 s instead of 400 ms: also beyond a NATS harness's AckWait.
		name: "retries_too_late", catches: "BrokerRetryAfterItsDelay", says: "not later than",
		source: func(c *rabbitmq.SourceConfig) { c.Retry.Delay *= 12 },
	},
	{
		name: "retries_permanent_failures", catches: "PermanentFailureDeadLetteredOnce", says: "retried neither in process nor by the broker",
		deadLetter: func(next deadletter.Sink) deadletter.Sink {
			return deadletter.Func(func(ctx context.Context, env deadletter.Envelope) error {
				env.Err = resilience.MarkTransient(errors.New(env.Err.Error())) // every failure taken for a transient one
				return next.Write(ctx, env)
			})
		},
	},
	{
		name: "ignores_max_deliveries", catches: "PoisonMessageDeadLetteredOnce", says: "the poison message alone is dead-lettered, once",
		source: func(c *rabbitmq.SourceConfig) { c.MaxDeliveries = 0 },
	},
	{
		name: "ignores_crash_ledger", catches: "CrashingMessageDeadLetteredOnce", says: "the queue is not done",
		source: func(c *rabbitmq.SourceConfig) { c.CrashLedger = "" },
	},
	{
		// A client that negotiates no heartbeat never notices a link
		// gone silent: the fault mode's silent-link case must catch it.
		name: "ignores_dead_links", catches: "Fault/timeout/Consume", says: "the connector gave up the timeout connection within",
		source: func(c *rabbitmq.SourceConfig) { c.URL += "?heartbeat=0" },
	},
	{
		// A source that dials the broker, not the address it is given
		// (as a Kafka client would after its first metadata answer
		// without a dial of its own): the fault never touches it.
		name: "ignores_addr", catches: "Fault/latency/Consume", says: "went through the proxy when the fault began",
		source: func(c *rabbitmq.SourceConfig) {
			u, err := url.Parse(c.URL)
			if err != nil {
				panic(err)
			}
			b, err := url.Parse(rabbitURL())
			if err != nil {
				panic(err)
			}
			u.Host = b.Host
			c.URL = u.String()
		},
	},
	{
		// Acking with multiple=true: settling a message settles every
		// earlier one still in flight, which under Unordered may not be
		// stored yet.
		name: "acks_multiple", catches: "OutOfOrderSettlingKeepsTheUnsettled", says: "the held message, never stored, is still in the queue",
		wrap: ackMultiple,
	},
	{
		name: "publisher_cuts_bodies", catches: "RoundTrip", says: "bytes that differ",
		publisher: func(s node.Sink[connectortest.Message]) node.Sink[connectortest.Message] {
			return cutting{s.(*rabbitmq.Publisher[connectortest.Message])}
		},
	},
}

// A broken is the sound harness with a variant's fault.
type broken struct {
	*rabbit
	v variant
}

func (b broken) NewSource(cfg connectortest.SourceConfig) (connectortest.Consumer[rabbitmq.Message], error) {
	c, err := b.rabbit.NewSource(cfg)
	if err == nil && b.v.wrap != nil {
		c.Source = wrapped{c.Source.(*rabbitmq.Source), b.v.wrap}
	}
	if err == nil && b.v.deadLetter != nil {
		inner := c.DeadLetter
		c.DeadLetter = func(next deadletter.Sink) deadletter.Sink { return b.v.deadLetter(inner(next)) }
	}
	return c, err
}

func (b broken) NewPublisher(queue string) (node.Sink[connectortest.Message], error) {
	p, err := b.rabbit.NewPublisher(queue)
	if err == nil && b.v.publisher != nil {
		p = b.v.publisher(p)
	}
	return p, err
}

// wrapped is a source whose Run emits through a broken emitter; it keeps
// the source's Open, Close and the rest.
type wrapped struct {
	*rabbitmq.Source
	wrap func(node.Emitter[rabbitmq.Message]) node.Emitter[rabbitmq.Message]
}

func (w wrapped) Run(ctx context.Context, out node.Emitter[rabbitmq.Message]) error {
	return w.Source.Run(ctx, w.wrap(out))
}

type emitter struct {
	node.Emitter[rabbitmq.Message]
	tracked func(context.Context, rabbitmq.Message, func(node.Outcome)) error
}

func (e emitter) EmitAt(ctx context.Context, m rabbitmq.Message, _ []byte) error {
	return e.Emit(ctx, m)
}

func (e emitter) EmitTracked(ctx context.Context, m rabbitmq.Message, done func(node.Outcome)) error {
	return e.tracked(ctx, m, done)
}

// ackMultiple settles, with each message delivered, every message emitted
// before it and not yet settled, as an ack with multiple=true does.
func ackMultiple(out node.Emitter[rabbitmq.Message]) node.Emitter[rabbitmq.Message] {
	type slot struct {
		done    func(node.Outcome)
		settled bool
	}
	var (
		mu      sync.Mutex
		pending []*slot
	)
	return emitter{out, func(ctx context.Context, m rabbitmq.Message, done func(node.Outcome)) error {
		s := &slot{done: done}
		mu.Lock()
		pending = append(pending, s)
		mu.Unlock()
		return out.EmitTracked(ctx, m, func(o node.Outcome) {
			mu.Lock()
			if s.settled {
				mu.Unlock()
				return
			}
			var earlier []*slot
			if o == node.Delivered {
				for _, p := range pending {
					if p == s {
						break
					}
					if !p.settled {
						p.settled = true
						earlier = append(earlier, p)
					}
				}
			}
			s.settled = true
			mu.Unlock()
			for _, p := range earlier {
				p.done(node.Delivered)
			}
			s.done(o)
		})
	}}
}

// cutting publishes every body but its last byte.
type cutting struct {
	*rabbitmq.Publisher[connectortest.Message]
}

func (c cutting) Write(ctx context.Context, m connectortest.Message) error {
	if len(m.Body) > 0 {
		m.Body = m.Body[:len(m.Body)-1]
	}
	return c.Publisher.Write(ctx, m)
}

// TestBroken runs the suite against a sound and each broken connector,
// in the process TestSuiteFailsBrokenConnectors starts, which picks the
// cases.
func TestBroken(t *testing.T) {
	if os.Getenv(brokenEnv) == "" {
		t.Skip("run by TestSuiteFailsBrokenConnectors")
	}
	url := servicetest.RabbitMQ(t)
	t.Run("sound", func(t *testing.T) { connectortest.Run(t, newRabbit(url)) })
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			h := newRabbit(url)
			h.source = v.source
			connectortest.Run(t, broken{h, v})
		})
	}
}

// TestSuiteFailsBrokenConnectors shows that the suite can fail: each
// broken connector fails the case meant to catch its fault, with that
// case's words, while the sound connector passes the same cases. The
// suite runs in a process of its own (this test binary again), whose
// verdict the test reads, since a failed subtest would fail this test
// too.
func TestSuiteFailsBrokenConnectors(t *testing.T) {
	t.Parallel()
	servicetest.RabbitMQ(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*connectortest.CaseTimeout)
	t.Cleanup(cancel) // after the parallel subtests
	var caught []string
	for _, v := range variants {
		caught = append(caught, v.catches)
	}
	t.Run("sound", func(t *testing.T) {
		t.Parallel()
		out, err := runSuite(ctx, "sound", strings.Join(caught, "|"))
		require.NoError(t, err, "the sound connector passes:\n%s", out)
		for _, c := range caught {
			assert.Contains(t, out, "--- PASS: TestBroken/sound/"+c+" ")
		}
	})
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			out, err := runSuite(ctx, v.name, v.catches)
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "the suite fails %s:\n%s", v.name, out)
			assert.Contains(t, out, "--- FAIL: TestBroken/"+v.name+"/"+v.catches+" ")
			assert.Contains(t, out, v.says)
		})
	}
}

// runSuite runs the suite's cases against a variant in a process of its
// own, and returns its output. cases are "|"-separated names, each of
// which may be a path of subtests ("Fault/timeout/Consume").
func runSuite(ctx context.Context, variant, cases string) (string, error) {
	// One alternation per level below the variant: a case's deeper levels
	// only match the subtests of a case that has them.
	var levels [][]string
	for _, c := range strings.Split(cases, "|") {
		for i, name := range strings.Split(c, "/") {
			if i == len(levels) {
				levels = append(levels, nil)
			}
			levels[i] = append(levels[i], name)
		}
	}
	run := "^TestBroken$/^" + variant + "$"
	for _, names := range levels {
		run += "/^(" + strings.Join(names, "|") + ")$"
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.v", "-test.count=1", "-test.run="+run)
	// Every fault case is in the suite (ChaosEnv): -test.run picks those
	// named, whichever the seed would pick.
	cmd.Env = append(os.Environ(), brokenEnv+"=1", variantEnv+"="+variant, connectortest.ChaosEnv+"=1")
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}
