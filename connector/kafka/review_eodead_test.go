package kafka_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// docs/kafka.md: "An output that failed for sure (not stored) does not
// abort the epoch by itself: its item's outcome decides, so a
// dead-lettered item settles and does not abort every epoch that reads it
// again." Here one output is refused by the output topic (larger than its
// max.message.bytes, below MaxRecordBytes): the Write fails permanently
// with ErrRecordTooLarge, the item is dead-lettered, its epoch should
// commit the other outputs and every input offset, and the letter be
// written once.
//
// What happens: the sink's Parallel Writes share one produce batch; the
// topic refuses the whole batch (MESSAGE_TOO_LARGE, the batch's size),
// and answer() fails every record of it with ErrRecordTooLarge,
// permanent: v0..v2, tiny, are dead-lettered as "record too large"
// beside v3, their outputs never produced, their offsets committed. The
// Publisher's Write goes through the same answer(). Failed so in 5 of 5
// runs under -race (the records must share a batch: see the report for
// the -count rate).
func TestExactlyOnceTooLargeOutputDeadLettersOnlyItsItem(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	in, out := pubName(t), pubName(t)
	createTopicOn(t, c, in, 1)
	createTopicOn(t, c, out, 1, "max.message.bytes", "2000")
	const n = 8
	fillInput(t, addrs, in, n)
	big := make([]byte, 5000)
	_, _ = rand.Read(big) // incompressible
	clock := clockwork.NewFakeClock()
	eo, err := kafka.NewExactlyOnce(kafka.ExactlyOnceConfig[kafka.Message]{Brokers: addrs, Topic: in, Group: in,
		TransactionalID: in + "-txn", Output: out, Clock: clock, CommitInterval: time.Second, MaxInFlight: 32,
		Record: func(m kafka.Message) (*kgo.Record, error) {
			if string(m.Value) == "v3" {
				return &kgo.Record{Key: m.Key, Value: big}, nil
			}
			return &kgo.Record{Key: m.Key, Value: m.Value}, nil
		}})
	require.NoError(t, err)
	dead := deadletter.NewMemory(100)
	b := pipeline.New("exactly-dead", pipeline.WithClock(clock), pipeline.WithDeadLetter(dead),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 0
			o.OnItemFailure = resilience.DeadLetter
		}))
	s := pipeline.Source(b, "in", eo.Source())
	pipeline.Sink(b, "out", s, eo.Sink(), pipeline.Parallel(4))
	p, err := b.Build()
	require.NoError(t, err)
	a := newAdmin(t, c)
	runErr := runUntil(t, p, eo.Source(), clock, time.Second, func() bool { return lagOf(t, a, in, in) == 0 })
	t.Logf("run: %v; commits %d, aborts %d, letters %d", runErr, eo.Source().Commits(), eo.Source().Aborts(), dead.Len())
	require.NoError(t, runErr)
	for _, env := range dead.Envelopes() {
		t.Logf("dead letter: %s: %v", env.Item.(kafka.Message).Value, env.Err)
	}
	assert.Zero(t, lagOf(t, a, in, in), "every input offset committed")
	var letters []string
	for _, env := range dead.Envelopes() {
		letters = append(letters, string(env.Item.(kafka.Message).Value))
	}
	assert.Equal(t, []string{"v3"}, letters, "only v3, the record too large, is dead-lettered")
	count := reviewRead(t, addrs, out, kgo.ReadCommitted())
	t.Logf("read_committed: %v; read_uncommitted: %v; end offset %d", count, reviewRead(t, addrs, out, kgo.ReadUncommitted()), countTopic(t, addrs, out))
	for i := range n {
		if i != 3 {
			assert.Equal(t, 1, count[fmt.Sprintf("v%d", i)], "v%d's output", i)
		}
	}
}

// reviewRead reads what topic holds at the isolation level given, within
// a short real wait, and counts the records by value (the large one as
// "big").
func reviewRead(t testing.TB, addrs []string, topic string, level kgo.IsolationLevel) map[string]int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(level))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(pubContext(t), 2*time.Second)
	defer cancel()
	count := map[string]int{}
	for ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			if len(v) > 100 {
				v = "big"
			}
			count[v]++
		})
	}
	return count
}
