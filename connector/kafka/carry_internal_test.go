package kafka

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/resilience"
)

// A copy's headers read back as the story written, the record's own
// headers kept before them, and earlier story headers replaced.
func TestCopyHeadersRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 12, 0, 0, 5, time.UTC)
	spec := copySpec{consumer: "orders/g", topic: "orders", partition: 3, offset: 42, deliveries: 2,
		due: at.Add(time.Minute),
		story: story{attempts: 4, first: at, origin: "price", failures: 1, retries: 2,
			history: []deadletter.Attempt{{Time: at, Layer: resilience.ItemRetry, Err: "boom", Node: "price"}},
			resume:  deadletter.Resume{Node: "price", Retry: 3, Since: at}}}
	own := []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-x")}, {Key: "sluice-failures", Value: []byte("9")}}
	hs := copyHeaders(own, spec)
	assert.Equal(t, own[0], hs[0], "the record's own headers stay")
	for _, h := range hs {
		assert.NotEqual(t, "sluice-failures", h.Key, "an earlier story header is replaced")
	}
	c := carriedOf(hs, "orders/g")
	require.True(t, c.ok)
	assert.Equal(t, "orders", c.topic)
	assert.Equal(t, int32(3), c.partition)
	assert.Equal(t, int64(42), c.offset)
	assert.Equal(t, 2, c.deliveries)
	assert.True(t, spec.due.Equal(c.due))
	assert.Equal(t, spec.story.attempts, c.past.attempts)
	assert.Equal(t, 1, c.past.failures)
	assert.Equal(t, 2, c.past.retries)
	assert.True(t, at.Equal(c.past.first))
	assert.Equal(t, "price", c.past.origin)
	require.Len(t, c.past.history, 1)
	assert.Equal(t, "boom", c.past.history[0].Err)
	assert.Equal(t, "price", c.past.resume.Node)
	assert.Equal(t, 3, c.past.resume.Retry)
	assert.True(t, at.Equal(c.past.resume.Since))
}

// Headers of a copy for another consumer, or of no copy, are not read;
// odd values read as none, never as a failure.
func TestCarriedOfOthers(t *testing.T) {
	t.Parallel()
	hs := copyHeaders(nil, copySpec{consumer: "orders/other", story: story{failures: 5}})
	assert.False(t, carriedOf(hs, "orders/g").ok, "a copy for another group is not counted")
	assert.False(t, carriedOf([]kgo.RecordHeader{{Key: HeaderFailures, Value: []byte("5")}}, "orders/g").ok,
		"Sluice-* headers without the consumer's name are not a copy")
	odd := []kgo.RecordHeader{{Key: HeaderConsumer, Value: []byte("orders/g")}, {Key: HeaderFailures, Value: []byte("-3")},
		{Key: HeaderDue, Value: []byte("tomorrow")}, {Key: HeaderHistory, Value: []byte("{")}}
	c := carriedOf(odd, "orders/g")
	assert.True(t, c.ok)
	assert.Zero(t, c.past.failures)
	assert.True(t, c.due.IsZero())
	assert.Nil(t, c.past.history)
}

// told adds a failed delivery to a story: its calls, its history after
// the earlier one, within broker.MaxHistory; a delivery that told nothing
// counts one call.
func TestStoryTold(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var st story
	st = st.told(deadletter.Envelope{Attempts: 2, OriginNode: "a", LastFailure: at, ErrText: "x",
		History: []deadletter.Attempt{{Err: "x1"}, {Err: "x2"}}}, at, true)
	assert.Equal(t, 2, st.attempts)
	assert.Equal(t, "a", st.origin)
	assert.True(t, at.Equal(st.first))
	st = st.told(deadletter.Envelope{OriginNode: "b", ErrText: "y"}, at.Add(time.Second), true)
	assert.Equal(t, 3, st.attempts, "a delivery that told no calls counts one")
	assert.Equal(t, "a", st.origin, "the first node stays")
	require.Len(t, st.history, 3)
	assert.Equal(t, "b", st.history[2].Node)
	assert.Equal(t, "y", st.history[2].Err)
	for range broker.MaxHistory {
		st = st.told(deadletter.Envelope{ErrText: strings.Repeat("z", 10)}, at, true)
	}
	assert.Len(t, st.history, broker.MaxHistory)
	before := len(st.history)
	assert.Len(t, st.told(deadletter.Envelope{ErrText: "handed off"}, at, false).history, before,
		"a hand-off without history makes none up")
	env := st.merge(deadletter.Envelope{Attempts: 1, OriginNode: "c"}, 9)
	assert.Equal(t, st.attempts+1, env.Attempts)
	assert.Equal(t, "a", env.OriginNode)
	assert.Equal(t, 3, story{}.merge(deadletter.Envelope{Attempts: 1}, 3).Attempts, "without a story each earlier delivery is one call")
}

// The error of a record that crashed the consumer matches ErrCrashed and
// ErrPoison, and says what happened.
func TestCrashErrorMatchesPoison(t *testing.T) {
	t.Parallel()
	err := crashError("kafka: poison record: record t/0/1 crashed the consumer")
	assert.ErrorIs(t, err, ErrCrashed)
	assert.ErrorIs(t, err, ErrPoison)
	assert.Contains(t, err.Error(), "crashed the consumer")
}
