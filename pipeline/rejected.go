package pipeline

import "github.com/sluicehq/sluice/deadletter"

// A RejectedItem is an item a source emits with EmitTracked that wants to
// know why it failed the run: when a node's failure action is Fail and the
// item (or a batch holding only it) fails that node, the engine calls
// Rejected with what a dead letter would say of the failure, before the
// run ends and the item's done runs with node.Rejected. A broker source
// keeps it, so that the envelope of a message it stops as poison names
// the node and the error of each failed run.
//
// The envelope holds Err and ErrText (the error or the panic's text),
// OriginNode and DecisionNode (the node that failed), Attempts (the calls
// the node made on the item in this run), LastFailure (when, on the
// pipeline's clock), and History when the node keeps one. Its Item is the
// node's input, which may be derived from the emitted item. A node
// restart may take the item up again after this call: only an outcome of
// node.Rejected says that the failure stood. Rejected runs on the node's
// goroutine and must be quick; a panic in it is ignored.
type RejectedItem interface {
	Rejected(env deadletter.Envelope)
}

// newRejected returns item as a RejectedItem, or nil.
func newRejected[T any](item T) RejectedItem {
	r, _ := any(item).(RejectedItem)
	return r
}

// tellRejected tells the root item of tr, when it is a RejectedItem, that
// it failed the node under the Fail action: as blame, only a root or a
// batch of one is told.
func (nr *nodeRun) tellRejected(tr *tracker, item any, fl *failure) {
	for tr != nil && tr.done == nil && len(tr.parents) == 1 {
		tr = tr.parents[0]
	}
	if tr == nil || tr.done == nil || tr.rej == nil {
		return
	}
	env, _ := nr.envelope(item, fl)
	if env.LastFailure.IsZero() {
		// A node that cannot dead-letter keeps no times: the clock is read
		// only now, for the rare item that fails the run.
		env.LastFailure = nr.rs.p.cfg.clock.Now()
	}
	if env.FirstFailure.IsZero() {
		env.FirstFailure = env.LastFailure
	}
	r := tr.rej
	_ = protect(func() { r.Rejected(env) })
}
