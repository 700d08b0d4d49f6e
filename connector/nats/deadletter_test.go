package nats_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A permanent failure goes to a DeadLetterPublisher's subject as a JSON
// envelope that deadletter.UnmarshalEnvelope reads back, with the message as its item;
// the message itself is terminated.
func TestDeadLetterPublisher(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	subject := a.stream(name)
	a.publish(subject, "bad", "good")
	dlSubject := name + ".dead"

	dlq, err := nats.NewDeadLetterPublisher(nats.DeadLetterConfig{URL: a.url, Subject: dlSubject})
	require.NoError(t, err)
	defer dlq.Close()
	src, err := nats.NewSource(a.config(name))
	require.NoError(t, err)
	// Only the input subject: the dead letters are not consumed again.
	b := pipeline.New("dl", pipeline.WithDeadLetter(src.DeadLetter(dlq)),
		pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
	stored := 0
	pipeline.ForEach(b, "store", pipeline.Filter(b, "input", pipeline.Source(b, "consume", src),
		func(m nats.Message) bool { return m.Subject == subject }), func(_ context.Context, m nats.Message) error {
		if string(m.Data) == "bad" {
			return resilience.MarkPermanent(errBroken)
		}
		stored++
		src.Stop()
		return nil
	})
	p, err := b.Build()
	require.NoError(t, err)
	_, err = p.Run(testContext(t))
	require.NoError(t, err)
	assert.Equal(t, 1, stored)

	s, err := a.js.Stream(testContext(t), name)
	require.NoError(t, err)
	m, err := s.GetLastMsgForSubject(testContext(t), dlSubject)
	require.NoError(t, err)
	assert.Equal(t, nats.EnvelopeType, m.Header.Get(nats.HeaderType))
	assert.Equal(t, "dl", m.Header.Get(nats.HeaderPipeline))
	env, err := deadletter.UnmarshalEnvelope(m.Data)
	require.NoError(t, err)
	assert.Equal(t, "store", env.OriginNode)
	assert.Contains(t, env.ErrText, "broken for good")
	assert.Equal(t, name+"/1", env.CorrelationID)
	var item nats.Message
	require.NoError(t, json.Unmarshal(env.Item.(json.RawMessage), &item))
	assert.Equal(t, "bad", string(item.Data))
	assert.Equal(t, uint64(1), item.Sequence)

	_, err = nats.NewDeadLetterPublisher(nats.DeadLetterConfig{})
	assert.Equal(t, []string{"Subject", "URL"}, fields(err))
}
