package pipeline

// tellRejected tells the root item of tr, when it is a RejectedItem, that
// it failed the node under the Fail action: as blame, only a root or a
// batch of one is told.
func (nr *nodeRun) tellRejected(tr *tracker, item any, fl *failure) {
	for tr != nil && tr.done == nil && len(tr.parents) == 1 {
		tr = tr.parents[0]
	}
	if tr == nil || tr.done == nil {
		return
	}
	r := tr.rejected()
	if r == nil {
		return
	}
	env, _ := nr.envelope(item, tr, fl)
	if env.LastFailure.IsZero() {
		// A node that cannot dead-letter keeps no times: the clock is read
		// only now, for the rare item that fails the run.
		env.LastFailure = nr.rs.p.cfg.clock.Now()
	}
	if env.FirstFailure.IsZero() {
		env.FirstFailure = env.LastFailure
	}
	_ = protect(func() { r.Rejected(env) })
}
