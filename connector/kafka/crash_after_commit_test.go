package kafka_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/pipeline"
)

// A crash ledger left by a process that died with records in flight,
// among them records the group has committed since (their settlement was
// buffered and lost, or another member took them over and committed), and
// a culprit mark on a committed record: the restart reads from the
// committed offset, dead-letters nothing, skips nothing, and commits the
// end; the suspect past the commit runs and is stored.
func TestCrashLedgerOfRecordsAlreadyCommitted(t *testing.T) {
	t.Parallel()
	a := newAdmin(t, sharedCluster(t, 1))
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, records(0, 6)...)

	// The records' ids in the ledger: topic/partition/offset@timestamp.
	cl, err := kgo.NewClient(kgo.SeedBrokers(a.addrs...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		topic: {0: kgo.NewOffset().AtStart()}}))
	require.NoError(t, err)
	defer cl.Close()
	ids := map[int64]string{}
	for len(ids) < 6 {
		fs := cl.PollFetches(testContext(t))
		require.NoError(t, testContext(t).Err())
		fs.EachRecord(func(r *kgo.Record) {
			ids[r.Offset] = r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "/" + strconv.FormatInt(r.Offset, 10) +
				"@" + strconv.FormatInt(r.Timestamp.UnixNano(), 10)
		})
	}
	path := filepath.Join(t.TempDir(), "ledger")
	var b []byte
	b = append(b, "sluice crash ledger v1\n"...)
	for _, o := range []int64{0, 1, 2, 3} {
		b = append(b, '+', ' ')
		b = strconv.AppendQuote(b, ids[o])
		b = append(b, '\n')
	}
	b = append(b, 'a', ' ')
	b = strconv.AppendQuote(b, ids[2])
	b = append(b, '\n')
	require.NoError(t, os.WriteFile(path, b, 0o644))

	// The group committed 3 since.
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: 3, LeaderEpoch: -1})
	resp, err := a.adm.CommitOffsets(testContext(t), topic, offs)
	require.NoError(t, err)
	require.NoError(t, resp.Error())

	cfg := a.config(topic)
	cfg.CrashLedger = path
	cfg.MaxDeliveries = 2
	src, err := kafka.NewSource(cfg)
	require.NoError(t, err)
	dead := deadletter.NewMemory(10)
	var (
		mu     sync.Mutex
		stored []int64
		p      *pipeline.Pipeline
	)
	bld := pipeline.New("crash3", pipeline.WithDeadLetter(dead))
	pipeline.ForEach(bld, "store", pipeline.Source(bld, "read", src), func(_ context.Context, m kafka.Message) error {
		mu.Lock()
		defer mu.Unlock()
		stored = append(stored, m.Offset)
		if m.Offset == 5 {
			p.Drain()
		}
		return nil
	})
	p, err = bld.Build()
	require.NoError(t, err)
	done := runAsync(t, p, testContext(t))
	require.NoError(t, waitRun(t, done))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []int64{3, 4, 5}, stored, "from the committed offset, the suspect past it included")
	assert.Zero(t, dead.Len(), "nothing dead-lettered: %v", fmt.Sprint(dead.Envelopes()))
	assert.Equal(t, map[int32]int64{0: 6}, a.committed(topic, topic))
}
