package kafka_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// A handling is one member's handling of one record: when it began and
// ended, on the real clock (measured, never waited on).
type handling struct {
	member     string
	key        string
	start, end time.Time
}

// A ledger keeps every handling of every record, by partition and
// offset.
type ledger struct {
	mu      sync.Mutex
	byRec   map[[2]int64][]handling
	by      map[string]int
	handled atomic.Int64
}

func newLedger() *ledger { return &ledger{byRec: map[[2]int64][]handling{}, by: map[string]int{}} }

// count returns the handlings of member, of every member for "".
func (l *ledger) count(member string) int {
	if member == "" {
		return int(l.handled.Load())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.by[member]
}

// handle is a member's store: it records the handling.
func (l *ledger) handle(member string) func(context.Context, kafka.Message) error {
	return func(_ context.Context, m kafka.Message) error {
		h := handling{member: member, key: string(m.Key), start: time.Now()}
		// Some work, so that handlings take time: a revoke that did
		// not wait for them would show as a record handled twice.
		sum := 0
		for i := range 100000 {
			sum += i
		}
		_ = sum
		h.end = time.Now()
		l.mu.Lock()
		k := [2]int64{int64(m.Partition), m.Offset}
		l.byRec[k] = append(l.byRec[k], h)
		l.by[member]++
		l.mu.Unlock()
		l.handled.Add(1)
		return nil
	}
}

// A feeder produces records, keyed k0…k(keys-1), as consumption goes:
// it keeps about backlog records ahead of what was handled, so that
// members join and leave while records flow, until stop is closed.
type feeder struct {
	a          *admin
	topic      string
	keys       int
	partitions int
	backlog    int
	stop       chan struct{}
	produced   int
}

func (f *feeder) run(ctx context.Context, handled func() int64) error {
	for {
		select {
		case <-f.stop:
			return nil
		default:
		}
		if int64(f.produced)-handled() >= int64(f.backlog) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-f.stop:
				return nil
			case <-time.After(time.Millisecond): // polling what the members handled
			}
			continue
		}
		n := 100
		recs := make([]*kgo.Record, n)
		for i := range recs {
			j := f.produced + i
			k := j % f.keys
			// The admin's client partitions by hand: a key's records go
			// to one partition, as Kafka's partitioner would send them.
			recs[i] = &kgo.Record{Topic: f.topic, Partition: int32(k % f.partitions), Key: []byte(fmt.Sprintf("k%d", k)), Value: []byte(fmt.Sprint(j))}
		}
		if err := f.a.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return err
		}
		f.produced += n
	}
}

// A member is one pipeline of the group.
type member struct {
	name string
	p    *pipeline.Pipeline
	done chan error
}

func startMember(t *testing.T, cfg kafka.SourceConfig, name string, l *ledger, opts ...kgo.Opt) *member {
	t.Helper()
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	kafka.AddClientOpts(src, opts...)
	b := pipeline.New(name)
	msgs := pipeline.Source(b, "consume", src, pipeline.NodeResilience(func(o *resilience.Options) {
		o.NodeRestart.MaxRestarts = 10
		o.NodeRestart.Backoff = resilience.NoBackoff()
	}))
	pipeline.ForEach(b, "store", msgs, l.handle(name), pipeline.Keyed(4, kafka.RecordKey))
	p, err := b.Build()
	require.NoError(t, err)
	m := &member{name: name, p: p, done: make(chan error, 1)}
	go func() {
		_, err := p.Run(testContext(t))
		m.done <- err
	}()
	return m
}

// leave drains the member and waits for its end.
func (m *member) leave(t *testing.T) {
	t.Helper()
	m.p.Drain()
	require.NoError(t, <-m.done, "member %s", m.name)
}

// TestRebalanceUnderLoad runs three members of one group over a topic of
// six partitions while records flow: B and C join, then A and B leave,
// all by the group's own rebalances (revokes), with a Keyed store. Nothing
// is lost; no record is handled twice (a revoke waits for the revoked
// partitions' records in flight, and commits them, before their next
// owner reads), so none is handled by two members at once; every key's
// records are handled in offset order across the members; and the
// group's commits reach the end of every partition.
func TestRebalanceUnderLoad(t *testing.T) {
	t.Parallel()
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 6)
	cfg := a.config(topic)
	cfg.MaxInFlight, cfg.SessionTimeout, cfg.CommitInterval = 64, 6*time.Second, 100*time.Millisecond
	fast := kgo.HeartbeatInterval(100 * time.Millisecond)

	l := newLedger()
	f := &feeder{a: a, topic: topic, keys: 50, partitions: 6, backlog: 400, stop: make(chan struct{})}
	ctx := testContext(t)
	fed := make(chan error, 1)
	go func() { fed <- f.run(ctx, l.handled.Load) }()

	// Each change waits for the last to show: the new member handles
	// records, or the others handle more once a member left.
	more := func(member string, n int) {
		from := l.count(member)
		waitFor(t, fmt.Sprintf("%d more records handled by %q", n, member), func() bool { return l.count(member) >= from+n })
	}
	ma := startMember(t, cfg, "A", l, fast)
	more("A", 500)
	mb := startMember(t, cfg, "B", l, fast)
	more("B", 300)
	mc := startMember(t, cfg, "C", l, fast)
	more("C", 300)
	ma.leave(t)
	more("", 1000)
	mb.leave(t)
	more("C", 500)
	close(f.stop)
	require.NoError(t, <-fed)
	total := f.produced
	waitFor(t, "every record handled", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.byRec) == total
	})
	mc.leave(t)

	l.mu.Lock()
	defer l.mu.Unlock()
	require.Len(t, l.byRec, total, "nothing lost")
	members := map[string]int{}
	byKey := map[string][][2]int64{}
	dups := 0
	for rec, hs := range l.byRec {
		if len(hs) > 1 {
			dups++
		}
		for i := range hs {
			members[hs[i].member]++
			for j := range hs[:i] {
				if hs[i].member != hs[j].member {
					assert.False(t, hs[i].start.Before(hs[j].end) && hs[j].start.Before(hs[i].end),
						"record %v handled by %s and %s at once", rec, hs[i].member, hs[j].member)
				}
			}
		}
		byKey[hs[0].key] = append(byKey[hs[0].key], rec)
	}
	assert.Zero(t, dups, "no record handled twice: every partition changed hands by a revoke that waited")
	for _, name := range []string{"A", "B", "C"} {
		assert.Positive(t, members[name], "member %s handled records", name)
	}
	for key, recs := range byKey {
		// Every record of a key is in one partition: handled in offset
		// order, whichever member handled it.
		sort.Slice(recs, func(i, j int) bool { return l.byRec[recs[i]][0].start.Before(l.byRec[recs[j]][0].start) })
		offsets := make([]int64, len(recs))
		for i, r := range recs {
			offsets[i] = r[1]
		}
		assert.True(t, slices.IsSorted(offsets), "key %s handled in offset order: %v", key, offsets)
	}
	ends := map[int32]int64{}
	for rec := range l.byRec {
		ends[int32(rec[0])] = max(ends[int32(rec[0])], rec[1]+1)
	}
	assert.Equal(t, ends, a.committed(topic, topic), "the group committed every partition to its end")
}
