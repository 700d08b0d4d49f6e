package kafka

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/node"
)

// handOvers is an Emitter of batches that takes the first `take`
// hand-overs and refuses the rest with errRefused, ending the refused
// batch Failed as the pipeline's Emitter does.
type handOvers struct {
	take   int
	got    [][]Message
	bursts int
}

var errRefused = errors.New("pipeline: the run is stopping")

func (h *handOvers) EmitTrackedWith(_ context.Context, ms []Message, done interface{ Done(node.Outcome) }) error {
	if len(h.got) >= h.take {
		done.Done(node.Failed)
		return errRefused
	}
	h.got = append(h.got, ms)
	return nil
}

func (h *handOvers) EmitTracked(ctx context.Context, ms []Message, done func(node.Outcome)) error {
	panic("the grouper hands over with EmitTrackedWith")
}
func (h *handOvers) Emit(context.Context, []Message) error { panic("not tracked") }
func (h *handOvers) EmitAt(context.Context, []Message, []byte) error {
	panic("not tracked")
}
func (h *handOvers) BeginBatch()                    { h.bursts++ }
func (h *handOvers) EndBatch(context.Context) error { return nil }

// gatherTest returns a session tracking partitions 0 to 2 of topic t,
// and records of it: for each partition in parts, the next offset.
func gatherTest(t *testing.T, parts ...int32) (*session, []*record) {
	s, err := NewSource(SourceConfig{Brokers: []string{"127.0.0.1:9092"}, Topic: "t", Group: "g"})
	require.NoError(t, err)
	sess := &session{src: s, tracker: newOffsetTracker()}
	sess.tracker.assign("t", []int32{0, 1, 2})
	next := map[int32]int64{}
	var recs []*record
	for _, p := range parts {
		r := sess.track(&kgo.Record{Topic: "t", Partition: p, Offset: next[p]})
		require.NotNil(t, r)
		require.True(t, sess.tracker.emit(r.track, &r.slot))
		next[p]++
		recs = append(recs, r)
	}
	return sess, recs
}

// A burst is handed over as one batch per run of one partition's
// records, in order; when a hand-over is refused, every record of the
// batches after it ends, unsettled, and so does every later emit of the
// Run, with the refusal's error; the gathered array keeps no record.
func TestGrouperEndsTheBatchesAfterARefusal(t *testing.T) {
	for take := range 4 {
		_, recs := gatherTest(t, 0, 0, 1, 1, 1, 2, 0)
		h := &handOvers{take: take}
		g := &grouper{out: h, with: h, b: h}
		g.BeginBatch()
		for _, r := range recs {
			require.NoError(t, g.EmitTrackedWith(context.Background(), r.message(), r))
		}
		err := g.EndBatch(context.Background())
		runs := [][]*record{recs[0:2], recs[2:5], recs[5:6], recs[6:7]}
		if take >= len(runs) {
			require.NoError(t, err)
		} else {
			require.ErrorIs(t, err, errRefused)
		}
		require.Len(t, h.got, min(take, len(runs)))
		for i, run := range runs {
			if i < take {
				require.Len(t, h.got[i], len(run))
				for j, r := range run {
					assert.Same(t, r, h.got[i][j].r, "batch %d, message %d", i, j)
					assert.False(t, r.ended.Load(), "a record handed over ended before its outcome")
				}
				continue
			}
			for _, r := range run {
				assert.True(t, r.ended.Load(), "take %d: a record of batch %d, after the refusal, did not end", take, i)
			}
		}
		assert.Equal(t, 1, h.bursts, "the batches of a burst of several partitions are handed over in one burst")
		for _, p := range g.pend[:cap(g.pend)] {
			assert.Nil(t, p.r, "the gathered array keeps a record")
		}

		_, more := gatherTest(t, 2)
		h.take = 100 // it would take it now: the grouper must not ask
		err = g.EmitTrackedWith(context.Background(), more[0].message(), more[0])
		if take >= len(runs) {
			require.NoError(t, err, "outside a burst, a record is handed over alone")
			assert.Same(t, more[0], h.got[len(h.got)-1][0].r)
			continue
		}
		require.ErrorIs(t, err, errRefused, "a refusal holds for the rest of the Run")
		assert.True(t, more[0].ended.Load())
	}
}
