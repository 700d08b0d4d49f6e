package connectortest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// caseContext returns the context of a case's waits: done after
// CaseTimeout, or when t ends.
func caseContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), CaseTimeout)
	t.Cleanup(cancel)
	return ctx
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// queueName returns a name no other case or run uses: the test's name and
// a random suffix, in characters every broker takes.
func queueName(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := unsafeName.ReplaceAllString(t.Name(), "_")
	if len(name) > 80 {
		name = name[len(name)-80:]
	}
	return "sluice-ct-" + name + "-" + hex.EncodeToString(b[:])
}

// keys returns n message keys, "m-00000" and on.
func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("m-%05d", i)
	}
	return out
}

// messages returns a message per key, its body the key's bytes.
func messages(ks ...string) []Message {
	out := make([]Message, len(ks))
	for i, k := range ks {
		out[i] = Message{Key: k, Body: []byte(k)}
	}
	return out
}

// A seen is an idempotent store's memory of the keys written to it: how
// often each arrived, in the order they first did.
type seen struct {
	mu     sync.Mutex
	counts map[string]int
	order  []string
}

func newSeen() *seen { return &seen{counts: map[string]int{}} }

// add records key and returns how many distinct keys there are and how
// many writes there were in all.
func (s *seen) add(key string) (distinct int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts[key]++; s.counts[key] == 1 {
		s.order = append(s.order, key)
	}
	return len(s.counts)
}

// snapshot returns a copy of the counts.
func (s *seen) snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.counts))
	for k, v := range s.counts {
		out[k] = v
	}
	return out
}

// A consumption is one pipeline that consumes a queue: the connector's
// source, an optional handler, and a store.
type consumption[M any] struct {
	h   Harness[M]
	cfg SourceConfig
	// handle, when set, is a transform before the store; its error fails
	// the item, under the pipeline's resilience.
	handle func(ctx context.Context, m Message) error
	// store is the sink; p is the pipeline, set before the run starts, so
	// that store can call p.Drain.
	store func(ctx context.Context, p *pipeline.Pipeline, m Message) error
	// opts configure the pipeline; dead is its dead-letter sink (through
	// the consumer's DeadLetter wrapper), nil for none.
	opts []pipeline.Option
	dead deadletter.Sink
	// parallel runs the handler with that many workers; unordered lets
	// its items leave in the order they end, not the order they came.
	parallel  int
	unordered bool
	// restart, when set, configures the source's node restart and node
	// retry in place of the default (5 restarts, no backoff).
	restart func(*resilience.Options)
}

// build returns the pipeline, with node restart on the source so that a
// lost connection is reopened.
func (c consumption[M]) build(t testing.TB) *pipeline.Pipeline {
	cons, err := c.h.NewSource(c.cfg)
	require.NoError(t, err, "connectortest: Harness.NewSource")
	require.NotNil(t, cons.Source, "connectortest: Harness.NewSource returned no Source")
	opts := slices.Clone(c.opts)
	if c.dead != nil {
		dead := c.dead
		if cons.DeadLetter != nil {
			dead = cons.DeadLetter(dead)
		}
		opts = append(opts, pipeline.WithDeadLetter(dead))
	}
	var p *pipeline.Pipeline
	b := pipeline.New("connectortest", opts...)
	restart := c.restart
	if restart == nil {
		restart = func(o *resilience.Options) {
			o.NodeRestart.MaxRestarts = 5
			o.NodeRestart.Backoff = resilience.NoBackoff()
		}
	}
	msgs := pipeline.Source(b, "consume", cons.Source, pipeline.NodeResilience(restart))
	if c.handle != nil {
		var popts []pipeline.NodeOption
		if c.parallel > 1 {
			popts = append(popts, pipeline.Parallel(c.parallel))
		}
		if c.unordered {
			popts = append(popts, pipeline.Unordered())
		}
		msgs = pipeline.Transform(b, "handle", msgs, node.TransformFunc[M, M](func(ctx context.Context, m M) (M, error) {
			return m, c.handle(ctx, c.h.Message(m))
		}), popts...)
	}
	pipeline.Sink(b, "store", msgs, node.SinkFunc[M](func(ctx context.Context, m M) error {
		return c.store(ctx, p, c.h.Message(m))
	}))
	p, err = b.Build()
	require.NoError(t, err)
	return p
}

// consumeAll consumes cfg.Queue until n distinct keys were stored, then
// drains the pipeline, and returns what was stored and how the run ended.
func consumeAll[M any](ctx context.Context, t testing.TB, h Harness[M], cfg SourceConfig, n int) (*seen, pipeline.Result, error) {
	s := newSeen()
	c := consumption[M]{h: h, cfg: cfg, store: func(_ context.Context, p *pipeline.Pipeline, m Message) error {
		if s.add(m.Key) >= n {
			p.Drain()
		}
		return nil
	}}
	res, err := c.build(t).Run(ctx)
	return s, res, err
}

// pendingSettle bounds how long requirePending waits for the broker's
// count to reach what a test wants.
const pendingSettle = 10 * time.Second

// requirePending fails t unless the broker holds want messages for queue,
// now or within pendingSettle. A connector may send its settlements
// without waiting for the broker's answer (NATS acks are published, not
// requested), and the harness reads the count on a connection of its own,
// so a count read as a run returns can still hold acks the broker has not
// processed (seen once: 145 of 400 under make chaos). Waiting hides no
// loss: a message left unsettled stays counted until someone consumes it.
func requirePending[M any](t testing.TB, h Harness[M], queue string, want int, msg string) {
	t.Helper()
	got := h.Pending(t, queue)
	if got == want {
		return
	}
	deadline := time.NewTimer(pendingSettle)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for got != want {
		select {
		case <-deadline.C:
			require.Equal(t, want, got, "%s (after %s)", msg, pendingSettle)
			return
		case <-tick.C:
			got = h.Pending(t, queue)
		}
	}
}
