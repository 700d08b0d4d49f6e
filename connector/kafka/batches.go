package kafka

import (
	"context"
	"slices"
	"strconv"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
)

// Batches returns the source as a [node.Source] of []Message: each item
// is a run of one partition's records, in offset order, as one poll
// returned them (records emitted again after a blameless failure come
// back with the others of their partition emitted again with them), so
// that a node handles a partition's records in one call, as a
// goroutine per partition does with franz-go alone. Give it to
// pipeline.Source instead of the Source itself (not both), and key the
// nodes that need the partition's order by [BatchKey]:
//
//	msgs := pipeline.Source(b, "orders", src.Batches())
//	pipeline.ForEach(b, "apply", msgs, applyAll, pipeline.Keyed(4, kafka.BatchKey))
//
// A batch holds at most MaxInFlight records, and at most MaxPollRecords
// when that is set: the larger a batch, the more one failure makes it
// handle again.
//
// A batch is one item: it settles as one, each of its records with the
// batch's outcome, and is retried, dead-lettered, skipped or fails the
// run as one. [Source.DeadLetter] takes it as it takes a []Message of a
// Batch node: each record goes to its tier when each of them may still be
// retried. The poison guard counts a batch's failed run against each of
// its records. A batch's records cannot be handed off to a tier (the
// item retry waits in process). A batch that fails blamelessly is emitted
// again behind the batches of its partition emitted since. With a
// CrashLedger, each batch holds one record, as each record of a Source
// waits for the turn of the one before it. See docs/kafka.md ("Batches of
// a partition").
//
// The returned source shares the Source's Open, Close, Stop, config and
// counts: it is a view of it, not a second member of the group.
func (s *Source) Batches() *BatchSource { return &BatchSource{s: s} }

// A BatchSource is a [Source] that emits a partition's records of one
// poll as one item (see [Source.Batches]).
type BatchSource struct{ s *Source }

// Unwrap returns the Source (node.Wrapper).
func (b *BatchSource) Unwrap() any { return b.s }

// Open opens the Source.
func (b *BatchSource) Open(ctx context.Context) error { return b.s.Open(ctx) }

// Close closes the Source.
func (b *BatchSource) Close(ctx context.Context) error { return b.s.Close(ctx) }

// Stop stops the Source (see [Source.Stop]).
func (b *BatchSource) Stop() { b.s.Stop() }

// UseDeadLetter gives the Source the pipeline's dead-letter sink, for the
// poison guard (deadletter.DeadLetterWriter).
func (b *BatchSource) UseDeadLetter(sink deadletter.Sink, base deadletter.Envelope) {
	b.s.UseDeadLetter(sink, base)
}

// Run runs the Source, emitting each partition's records of a poll as
// one []Message.
func (b *BatchSource) Run(ctx context.Context, out node.Emitter[[]Message]) error {
	g := &grouper{out: out}
	g.with, _ = out.(trackedWithBatch)
	g.b, _ = out.(batcher)
	return b.s.Run(ctx, g)
}

// BatchKey returns the key to give pipeline.Keyed for the batches of
// [Source.Batches]: the topic and partition their records were read from,
// as "topic/partition", so that a partition's batches are handled in
// order. It returns "" for an empty batch, which the source never emits.
func BatchKey(ms []Message) string {
	if len(ms) == 0 {
		return ""
	}
	t, p := ms[0].Topic, ms[0].Partition
	if r := ms[0].r; r != nil {
		// A tier's copy names the record it stands for: the batch is of
		// the partition the copy was read from.
		t, p = r.kr.Topic, r.kr.Partition
	}
	return t + "/" + strconv.FormatInt(int64(p), 10)
}

// trackedWithBatch is trackedWith for the items of a BatchSource.
type trackedWithBatch interface {
	EmitTrackedWith(ctx context.Context, item []Message, done interface{ Done(node.Outcome) }) error
}

// A recordBatch is the records of one item of a BatchSource: its Done
// settles each of them with the item's outcome.
type recordBatch struct {
	msgs []Message
	recs []*record
}

// Done settles each record of the batch with o.
func (b *recordBatch) Done(o node.Outcome) {
	for _, r := range b.recs {
		r.done(o)
	}
}

// Rejected tells each record of the batch why the batch failed the run
// (deadletter.RejectedItem), for the poison guard's copies.
func (b *recordBatch) Rejected(env deadletter.Envelope) {
	for _, r := range b.recs {
		r.Rejected(env)
	}
}

// A grouper is the Emitter a BatchSource gives its Source's Run: the
// records emitted between BeginBatch and EndBatch are gathered, and
// handed over at EndBatch as one item per run of records of one
// partition (a poll's records come partition by partition); a record
// emitted outside is handed over at once, alone.
type grouper struct {
	out  node.Emitter[[]Message]
	with trackedWithBatch // out's EmitTrackedWith, or nil
	b    batcher          // out's BeginBatch and EndBatch, or nil

	on bool
	// err is why a hand-over was refused: the run is stopping, or the
	// source's context ended, so every later emit of the Run is refused
	// too, at once (as the pipeline's Emitter would).
	err error
	// pend is what was gathered since BeginBatch, in order; its array is
	// kept from one burst to the next, cleared.
	pend []gathered
}

// gathered is a record emitted in a burst, with its Message.
type gathered struct {
	m Message
	r *record
}

// BeginBatch starts gathering.
func (g *grouper) BeginBatch() { g.on = true }

// EndBatch hands over what was gathered, a batch per run of records of
// one partition, in order. When a hand-over fails, its batch ended Failed
// (as EmitTracked does), and so do the batches after it; the error says
// why.
func (g *grouper) EndBatch(ctx context.Context) error {
	g.on = false
	all := g.pend
	if len(all) == 0 {
		return nil
	}
	defer func() {
		clear(all) // the array is kept: it must not keep the records
		g.pend = all[:0]
	}()
	many := g.b != nil && slices.ContainsFunc(all[1:], func(x gathered) bool { return !samePartition(x.r, all[0].r) })
	if many {
		g.b.BeginBatch()
	}
	var err error
	for rest := all; len(rest) > 0; {
		n := 1
		for n < len(rest) && samePartition(rest[n].r, rest[0].r) {
			n++
		}
		rb := &recordBatch{msgs: make([]Message, n), recs: make([]*record, n)}
		for i := range n {
			rb.msgs[i], rb.recs[i] = rest[i].m, rest[i].r
		}
		rest = rest[n:]
		if err != nil {
			rb.Done(node.Failed)
			continue
		}
		err = g.hand(ctx, rb)
	}
	g.err = err
	if many {
		if e := g.b.EndBatch(ctx); err == nil {
			err = e
		}
	}
	return err
}

// samePartition reports whether a and b were read from one partition.
func samePartition(a, b *record) bool {
	return a.kr.Partition == b.kr.Partition && a.kr.Topic == b.kr.Topic
}

// hand hands rb over as one tracked item.
func (g *grouper) hand(ctx context.Context, rb *recordBatch) error {
	if g.with != nil {
		return g.with.EmitTrackedWith(ctx, rb.msgs, rb)
	}
	return g.out.EmitTracked(ctx, rb.msgs, rb.Done)
}

// EmitTrackedWith gathers m, whose done is its record, into the batch of
// its partition; outside BeginBatch and EndBatch it hands m over alone.
func (g *grouper) EmitTrackedWith(ctx context.Context, m Message, done interface{ Done(node.Outcome) }) error {
	r, ok := done.(*record)
	if !ok || r == nil {
		return g.out.EmitTracked(ctx, []Message{m}, done.Done)
	}
	if g.err != nil {
		done.Done(node.Failed)
		return g.err
	}
	if !g.on {
		err := g.hand(ctx, &recordBatch{msgs: []Message{m}, recs: []*record{r}})
		g.err = err
		return err
	}
	g.pend = append(g.pend, gathered{m, r})
	return nil
}

// EmitTracked hands m over alone; the Source uses EmitTrackedWith.
func (g *grouper) EmitTracked(ctx context.Context, m Message, done func(node.Outcome)) error {
	return g.out.EmitTracked(ctx, []Message{m}, done)
}

// Emit hands m over alone, untracked; the Source does not use it.
func (g *grouper) Emit(ctx context.Context, m Message) error {
	return g.out.Emit(ctx, []Message{m})
}

// EmitAt hands m over alone; the Source does not use it.
func (g *grouper) EmitAt(ctx context.Context, m Message, pos []byte) error {
	return g.out.EmitAt(ctx, []Message{m}, pos)
}
