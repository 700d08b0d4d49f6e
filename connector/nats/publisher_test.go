package nats_test

import (
	"context"
	"errors"
	"testing"

	natsgo "github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// An order names itself: its CorrelationID is the publisher's default
// Nats-Msg-Id.
type order struct{ ID string }

func (o order) CorrelationID() string { return "order-" + o.ID }

func orderMessage(o order) (*natsgo.Msg, error) { return &natsgo.Msg{Data: []byte(o.ID)}, nil }

// Publishing the same items twice, as a pipeline run again would, stores
// each once: the Nats-Msg-Id from the item's CorrelationID puts the second
// publish in the stream's duplicate window.
func TestPublisherDedupByMsgID(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	pub, err := nats.NewPublisher(nats.PublisherConfig[order]{URL: a.url, Subject: subject, Message: orderMessage})
	require.NoError(t, err)

	for range 2 {
		b := pipeline.New("publish")
		orders := pipeline.Source(b, "orders", pipelinetest.NewSliceSource(ids(25)...))
		pipeline.Sink(b, "publish", pipeline.Map(b, "order", orders, func(_ context.Context, id string) (order, error) {
			return order{ID: id}, nil
		}), pub)
		p, err := b.Build()
		require.NoError(t, err)
		_, err = p.Run(testContext(t))
		require.NoError(t, err)
	}
	assert.Equal(t, uint64(25), a.messages(name), "stored once")
	assert.Equal(t, int64(25), pub.Duplicates(), "the second run's publishes were duplicates")

	// The id is on the stored message.
	s, err := a.js.Stream(testContext(t), name)
	require.NoError(t, err)
	m, err := s.GetMsg(testContext(t), 1)
	require.NoError(t, err)
	assert.Equal(t, "order-m-00000", m.Header.Get("Nats-Msg-Id"))
}

// MsgID in the config wins over the item's CorrelationID; a subject no
// stream stores fails, transient and not blameless.
func TestPublisherMsgIDAndNoStream(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	pub, err := nats.NewPublisher(nats.PublisherConfig[order]{URL: a.url, Subject: subject, Message: orderMessage,
		MsgID: func(o order) string { return "same" }})
	require.NoError(t, err)
	ctx := testContext(t)
	require.NoError(t, pub.Open(ctx))
	defer pub.Close(ctx)
	require.NoError(t, pub.Write(ctx, order{ID: "1"}))
	require.NoError(t, pub.Write(ctx, order{ID: "2"}))
	assert.Equal(t, uint64(1), a.messages(name))
	assert.Equal(t, int64(1), pub.Duplicates())

	nowhere, err := nats.NewPublisher(nats.PublisherConfig[order]{URL: a.url, Subject: "sluice-test-nowhere." + name, Message: orderMessage})
	require.NoError(t, err)
	defer nowhere.Close(ctx)
	err = nowhere.Write(ctx, order{ID: "1"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nats: publish to subject")
	assert.Contains(t, err.Error(), "no stream stores the subject")
	assert.True(t, resilience.IsTransient(err), "a stream may be between leaders")
	assert.False(t, resilience.IsBlameless(err), "a subject no stream stores runs out of retries")

	failing, err := nats.NewPublisher(nats.PublisherConfig[order]{URL: a.url, Subject: subject,
		Message: func(order) (*natsgo.Msg, error) { return nil, errBroken }})
	require.NoError(t, err)
	defer failing.Close(ctx)
	err = failing.Write(ctx, order{ID: "1"})
	assert.True(t, errors.Is(err, errBroken))
	assert.False(t, resilience.IsTransient(err))
}
