package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/resilience"
)

type msg struct{ d *dlv }

type dlv struct {
	id      string
	gone    bool
	retries int
}

// fake is a source whose deliveries are its own when their message says
// so; it records what it gives back to its broker.
type fake struct {
	enabled bool
	max     int
	byID    map[string]*dlv
	retried []*dlv
	err     error
}

func (f *fake) Deliveries(env deadletter.Envelope) []*dlv {
	return broker.Deliveries(env, func(m msg) (*dlv, bool) { return m.d, m.d != nil },
		func(id string) (*dlv, bool) { d, ok := f.byID[id]; return d, ok })
}
func (f *fake) Merge(d *dlv, env deadletter.Envelope) deadletter.Envelope {
	env.OriginNode = "first-" + d.id
	return env
}
func (f *fake) Enabled() bool            { return f.enabled }
func (f *fake) Gone(d *dlv) bool         { return d.gone }
func (f *fake) Transient(err error) bool { return resilience.Classifier{}.IsTransient(err) }
func (f *fake) Exhausted(d *dlv) bool    { return d.retries >= f.max }
func (f *fake) Retry(_ context.Context, ds []*dlv, _ deadletter.Envelope) error {
	if f.err != nil {
		return f.err
	}
	f.retried = append(f.retried, ds...)
	return nil
}

var errPoison = errors.New("test: poison")

func transient() error { return resilience.MarkTransient(errors.New("flaky")) }

// The sink retries at the broker only what came from its source, failed
// transiently and has retries left; everything else reaches Next, the
// story of a single message told from its first delivery.
func TestRetrySinkDecides(t *testing.T) {
	t.Parallel()
	exhausted := &resilience.RetryExhaustedError{Attempts: 4, Err: transient()}
	cases := []struct {
		name    string
		enabled bool
		env     deadletter.Envelope
		retried bool
		written string // OriginNode of what Next got; "" for nothing
	}{
		{"transient, own message", true, deadletter.Envelope{Item: msg{&dlv{id: "a"}}, Err: transient()}, true, ""},
		{"exhausted in process is still transient", true, deadletter.Envelope{Item: &msg{&dlv{id: "a"}}, Err: exhausted}, true, ""},
		{"retried mark peeled", true, deadletter.Envelope{Item: msg{&dlv{id: "a"}}, Err: resilience.MarkRetried(transient(), 3)}, true, ""},
		{"permanent", true, deadletter.Envelope{Item: msg{&dlv{id: "a"}}, Err: errors.New("bad")}, false, "first-a"},
		{"disabled", false, deadletter.Envelope{Item: msg{&dlv{id: "a"}}, Err: transient()}, false, "first-a"},
		{"broker retries used", true, deadletter.Envelope{Item: msg{&dlv{id: "a", retries: 2}}, Err: transient()}, false, "first-a"},
		{"poison passes as it is", true, deadletter.Envelope{Item: msg{&dlv{id: "a"}}, Err: fmt.Errorf("x: %w", errPoison), OriginNode: "n"}, false, "n"},
		{"not the source's", true, deadletter.Envelope{Item: "other", Err: transient(), OriginNode: "n"}, false, "n"},
		{"by correlation id", true, deadletter.Envelope{Item: "derived", CorrelationID: "c", Err: transient()}, true, ""},
		{"gone", true, deadletter.Envelope{Item: msg{&dlv{id: "a", gone: true}}, Err: errors.New("bad")}, true, ""},
		{"batch with a stranger", true, deadletter.Envelope{Item: []msg{{&dlv{id: "a"}}, {}}, Err: transient(), OriginNode: "n"}, false, "n"},
		{"batch keeps its own story", true, deadletter.Envelope{Item: []msg{{&dlv{id: "a"}}, {&dlv{id: "b"}}}, Err: errors.New("bad"), OriginNode: "n"}, false, "n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			next := deadletter.NewMemory(10)
			src := &fake{enabled: c.enabled, max: 2, byID: map[string]*dlv{"c": {id: "c"}}}
			sink := &broker.RetrySink[*dlv]{Source: src, Next: next, Poison: errPoison}
			retried, err := sink.WriteOrRetry(t.Context(), c.env)
			require.NoError(t, err)
			assert.Equal(t, c.retried, retried)
			got := next.Envelopes()
			if c.written == "" {
				assert.Empty(t, got)
				return
			}
			require.Len(t, got, 1)
			assert.Equal(t, c.written, got[0].OriginNode)
		})
	}
}

// A retry the broker refuses fails the write, and nothing reaches Next.
func TestRetrySinkRetryError(t *testing.T) {
	t.Parallel()
	next := deadletter.NewMemory(10)
	boom := errors.New("no retry queue")
	sink := &broker.RetrySink[*dlv]{Source: &fake{enabled: true, max: 2, err: boom}, Next: next}
	retried, err := sink.WriteOrRetry(t.Context(), deadletter.Envelope{Item: msg{&dlv{id: "a"}}, Err: transient()})
	require.ErrorIs(t, err, boom)
	assert.False(t, retried)
	assert.Empty(t, next.Envelopes())
	require.ErrorIs(t, sink.Write(t.Context(), deadletter.Envelope{Item: msg{&dlv{id: "a"}}, Err: transient()}), boom)
}

// Next's own broker retry passes through a chain of retry sinks.
func TestRetrySinkChains(t *testing.T) {
	t.Parallel()
	inner := &broker.RetrySink[*dlv]{Source: &fake{enabled: true, max: 2}, Next: deadletter.NewMemory(1)}
	outer := &broker.RetrySink[*dlv]{Source: &fake{}, Next: inner}
	retried, err := outer.WriteOrRetry(t.Context(), deadletter.Envelope{Item: msg{&dlv{id: "a"}}, Err: transient()})
	require.NoError(t, err)
	assert.True(t, retried, "the inner sink gave the item back to its broker")
}

// A CrashError matches both of its connector's sentinels and nothing else.
func TestCrashErrorMatchesItsSentinels(t *testing.T) {
	t.Parallel()
	crashed, poison := errors.New("crashed"), errors.New("poison")
	err := fmt.Errorf("wrapped: %w", &broker.CrashError{Text: "x: it crashed", Crashed: crashed, Poison: poison})
	assert.ErrorIs(t, err, crashed)
	assert.ErrorIs(t, err, poison)
	assert.NotErrorIs(t, err, errPoison)
	assert.Equal(t, "wrapped: x: it crashed", err.Error())
}
