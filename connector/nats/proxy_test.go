package nats_test

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/connectortest"
	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// TestSourceReconnects cuts the source's connection in the middle of a
// run: Run ends with a transient error matching ErrConnectionLost, node
// restart opens the source on a new connection, the server delivers again
// what was not acked (after AckWait: the acks of the dead connection never
// came), and every message arrives.
func TestSourceReconnects(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	const n = 500
	a.publish(subject, ids(n)...)
	px := newProxy(t, a.url)

	cfg := a.config(name)
	cfg.URL = px.URL(a.url)
	cfg.AckWait = time.Second
	cfg.Batch = 20
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)
	var (
		mu      sync.Mutex
		seen    = map[string]int{}
		written int
		errs    []error
		cut     string
		again   int
	)
	b := pipeline.New("reconnect", pipeline.WithObserver(restarts{mu: &mu, errs: &errs}))
	msgs := pipeline.Source(b, "consume", src, pipeline.NodeResilience(func(o *resilience.Options) {
		o.NodeRestart.MaxRestarts = 5
		o.NodeRestart.Backoff = resilience.NoBackoff()
	}))
	pipeline.ForEach(b, "store", msgs, func(_ context.Context, m nats.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if written++; written == 100 {
			// This item's settlement is lost with the connection: the
			// server must deliver it again.
			px.Cut()
			cut = string(m.Data)
			return errBroken
		}
		if string(m.Data) == cut {
			again = m.Deliveries
		}
		seen[string(m.Data)]++
		if len(seen) == n {
			src.Stop()
		}
		return nil
	}, pipeline.NodeResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.Skip }))
	p, err := b.Build()
	require.NoError(t, err)
	res, err := p.Run(testContext(t))
	require.NoError(t, err)

	assert.Len(t, seen, n, "every message arrives")
	assert.GreaterOrEqual(t, again, 2, "the message whose settlement was lost came again")
	assert.GreaterOrEqual(t, px.Connections(), 2, "the source connected again")
	assert.GreaterOrEqual(t, nodeOf(t, res, "consume").NodeRestarts, int64(1))
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, errs)
	assert.ErrorIs(t, errs[0], nats.ErrConnectionLost)
	assert.True(t, resilience.IsTransient(errs[0]))
}

// A publisher whose connection was cut reconnects on its next publish
// (PubRetry), and the stream has every message once.
func TestPublisherReconnects(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	px := newProxy(t, a.url)
	pub, err := nats.NewPublisher(nats.PublisherConfig[string]{
		URL: px.URL(a.url), Subject: subject,
		Message:  func(s string) (*natsgo.Msg, error) { return &natsgo.Msg{Data: []byte(s)}, nil },
		MsgID:    func(s string) string { return s },
		PubRetry: nats.PubRetry{Enabled: true, Delay: 10 * time.Millisecond},
	})
	require.NoError(t, err)
	ctx := testContext(t)
	require.NoError(t, pub.Open(ctx))
	defer pub.Close(ctx)
	for i, id := range ids(20) {
		if i == 10 {
			px.Cut()
		}
		require.NoError(t, pub.Write(ctx, id))
	}
	assert.Equal(t, uint64(20), a.messages(name))
	assert.Equal(t, 2, px.Connections())
}

// restarts records the errors that restarted a node.
type restarts struct {
	observer.Nop
	mu   *sync.Mutex
	errs *[]error
}

func (r restarts) OnRetry(e observer.RetryEvent) {
	if e.Kind == resilience.NodeRestart {
		r.mu.Lock()
		*r.errs = append(*r.errs, e.Err)
		r.mu.Unlock()
	}
}

// newProxy starts connectortest's proxy, on toxiproxy's toxics, to the
// server of serverURL; it closes when t ends.
func newProxy(t *testing.T, serverURL string) *connectortest.Proxy {
	t.Helper()
	u, err := url.Parse(serverURL)
	require.NoError(t, err)
	return connectortest.NewProxy(t, u.Host)
}
