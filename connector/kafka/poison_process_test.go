package kafka_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/kafka"
)

// The poison guard's count of failed runs survives the process: the
// count goes on in a copy of the record, produced to the topic and acked
// before the original settles, and Close waits for that copy (up to
// CloseTimeout) before it ends the session. Each run here is a new
// process in miniature: a new Source (nothing kept in memory) on the same
// group. A lone poison record fails its first run; that run's copy is in
// the topic and the original committed past once the pipeline's Run
// returned, and the record is dead-lettered within MaxDeliveries runs.
func TestPoisonCountSurvivesProcess(t *testing.T) {
	c := sharedCluster(t, 1)
	a := newAdmin(t, c)
	topic := uniqueName(t)
	a.topic(topic, 1)
	a.produce(topic, rec(0, "", "poison"))
	cfg := a.config(topic)
	cfg.MaxDeliveries = 2

	lettered := 0
	for run := 1; run <= 4 && lettered == 0; run++ {
		r := newPoisonRun(t, cfg, 1) // a new Source: a new process
		_, err := r.p.Run(testContext(t))
		lettered = r.dead.Len()
		if err == nil || lettered > 0 {
			break
		}
		require.ErrorIs(t, err, errPoison)
		if run == 1 {
			ends, lerr := a.adm.ListEndOffsets(testContext(t), topic)
			require.NoError(t, lerr)
			end, _ := ends.Lookup(topic, 0)
			assert.Equal(t, int64(2), end.Offset, "the first failed run's count is in a copy in the topic")
			assert.Equal(t, map[int32]int64{0: 1}, a.committed(topic, topic), "the original is committed past its copy")
		}
	}
	ends, err := a.adm.ListEndOffsets(testContext(t), topic)
	require.NoError(t, err)
	end, _ := ends.Lookup(topic, 0)
	t.Logf("topic end offset %d, committed %v", end.Offset, a.committed(topic, topic))
	assert.Equal(t, 1, lettered, "dead-lettered within 4 processes' runs with MaxDeliveries 2")
	_ = kafka.ErrPoison
}
