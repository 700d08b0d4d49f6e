package kafka_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/deadletter"
)

// createTopic creates topic with partitions on the shared cluster.
func createTopic(t testing.TB, topic string, partitions int32) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(sharedCluster(t, 1).ListenAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic)
	require.NoError(t, err)
	require.NoError(t, res.Err)
}

// readAll reads n records of topic from its start, failing t after a
// bounded wait.
func readAll(t testing.TB, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(sharedCluster(t, 1).ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read %d of %d records of %s", len(out), n, topic)
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

func headerOf(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Each envelope is stored as JSON that reads back as the envelope, with
// the dead-letter headers, keyed by its correlation id: the letters of
// one record share a partition.
func TestDeadLetterPublisherWrites(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t)
	createTopic(t, topic, 4)
	d, err := kafka.NewDeadLetterPublisher(kafka.DeadLetterConfig{Brokers: sharedCluster(t, 1).ListenAddrs(), Topic: topic})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	ctx := context.Background()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	envs := []deadletter.Envelope{
		{Item: "a", Err: errors.New("boom"), Pipeline: "p", RunID: "r1", OriginNode: "price", CorrelationID: "orders/0/1", Attempts: 3, LastFailure: at},
		{Item: "b", Err: errors.New("boom again"), Pipeline: "p", RunID: "r2", OriginNode: "price", CorrelationID: "orders/0/1", Attempts: 1, LastFailure: at},
		{Item: "c", Err: errors.New("other"), Pipeline: "p", RunID: "r2", OriginNode: "store", CorrelationID: "orders/1/9", LastFailure: at},
	}
	for _, env := range envs {
		require.NoError(t, d.Write(ctx, env))
	}
	recs := readAll(t, topic, len(envs))
	byRun := map[string]*kgo.Record{}
	for _, r := range recs {
		env, err := deadletter.UnmarshalEnvelope(r.Value)
		require.NoError(t, err)
		assert.Equal(t, kafka.EnvelopeType, headerOf(r, kafka.HeaderType))
		assert.Equal(t, "application/json", headerOf(r, "Content-Type"))
		assert.Equal(t, env.Pipeline, headerOf(r, kafka.HeaderPipeline))
		assert.Equal(t, env.OriginNode, headerOf(r, kafka.HeaderOriginNode))
		assert.Equal(t, env.RunID, headerOf(r, kafka.HeaderRunID))
		assert.Equal(t, env.CorrelationID, string(r.Key))
		byRun[env.RunID+"/"+env.OriginNode] = r
		if env.RunID == "r1" {
			assert.Equal(t, "boom", env.ErrText)
			assert.Equal(t, 3, env.Attempts)
			assert.True(t, at.Equal(env.LastFailure))
		}
	}
	require.Len(t, byRun, 3)
	assert.Equal(t, byRun["r1/price"].Partition, byRun["r2/price"].Partition, "one record's letters share a partition")
}

// A topic that does not exist fails the write: the engine retries it and
// then fails the run, nothing is dropped.
func TestDeadLetterPublisherMissingTopic(t *testing.T) {
	t.Parallel()
	topic := "dlt-nowhere-" + uniqueName(t)
	d, err := kafka.NewDeadLetterPublisher(kafka.DeadLetterConfig{Brokers: sharedCluster(t, 1).ListenAddrs(), Topic: topic,
		AckTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	err = d.Write(context.Background(), deadletter.Envelope{Item: "x", Err: errors.New("boom")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), topic)
}

// After Close a write fails; Close twice is fine.
func TestDeadLetterPublisherClosed(t *testing.T) {
	t.Parallel()
	d, err := kafka.NewDeadLetterPublisher(kafka.DeadLetterConfig{Brokers: sharedCluster(t, 1).ListenAddrs(), Topic: uniqueName(t)})
	require.NoError(t, err)
	require.NoError(t, d.Close())
	require.NoError(t, d.Close())
	err = d.Write(context.Background(), deadletter.Envelope{Item: "x", Err: errors.New("boom")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "closed")
}

// Every problem of the config is reported, each naming its field.
func TestDeadLetterConfigValidate(t *testing.T) {
	t.Parallel()
	_, err := kafka.NewDeadLetterPublisher(kafka.DeadLetterConfig{Brokers: []string{""}, Topic: "bad topic",
		AckTimeout: -1, DialTimeout: -1, CloseTimeout: -1})
	require.Error(t, err)
	assert.ErrorIs(t, err, kafka.ErrInvalidConfig)
	for _, f := range []string{"Brokers[0]", "Topic", "AckTimeout", "DialTimeout", "CloseTimeout"} {
		assert.Contains(t, err.Error(), "kafka: "+f+" = ", f)
	}
	_, err = kafka.NewDeadLetterPublisher(kafka.DeadLetterConfig{})
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "Brokers") && strings.Contains(err.Error(), "Topic"))
}
