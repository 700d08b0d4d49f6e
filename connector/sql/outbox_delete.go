package sql

import (
	"context"
	"strings"

	"github.com/sluicehq/sluice/resilience"
)

// takeErr returns the error of a failed delete, once.
func (o *OutboxSource[T]) takeErr() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	err := o.err
	o.err = nil
	select {
	case <-o.failed:
	default:
	}
	return err
}

// startDeleter starts the goroutine that deletes settled rows, unless it
// runs, and wakes it: a Run after a failed delete tries again. A delete
// that failed before, or that started before and fails later, is not this
// Run's failure.
func (o *OutboxSource[T]) startDeleter() {
	o.mu.Lock()
	o.runs++
	o.err = nil
	select {
	case <-o.failed:
	default:
	}
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
	if o.deleter != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &deleter{stop: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	o.deleter = d
	go func() {
		defer close(d.done)
		for {
			select {
			case <-d.stop:
				return
			case <-o.wake:
			}
			o.mu.Lock()
			run := o.runs
			o.mu.Unlock()
			err := o.deleteSettled(ctx)
			for n := 1; err != nil && n <= outboxRetries; n++ {
				// The keys stay held while the deleter waits: no row is
				// emitted again, and MaxInFlight bounds what waits.
				t := o.opts.Clock.NewTimer(o.retryDelay(n))
				select {
				case <-t.Chan():
				case <-d.stop:
					t.Stop()
					return // Close tries once more
				}
				err = o.deleteSettled(ctx)
				if err == nil {
					break
				}
				if n == outboxRetries {
					err = resilience.MarkRetried(err, n+1)
				}
			}
			if err != nil {
				// A failure of a delete that started before the current
				// Run is not its: that Run woke this loop to try again.
				o.mu.Lock()
				if run == o.runs {
					o.err = err
					select {
					case o.failed <- struct{}{}:
					default:
					}
				}
				o.mu.Unlock()
			}
		}
	}()
}

// deleteSettled deletes (or marks) the settled rows, DeleteBatch keys at a
// time, until none is left or a delete fails; the keys of a failed delete
// stay settled, for the next try. A delete tried again after one that
// committed and failed to say so deletes no other row, as the keys of
// the table are never taken again (see OutboxOptions.Key).
func (o *OutboxSource[T]) deleteSettled(ctx context.Context) error {
	op := "delete"
	if o.opts.MarkColumn != "" {
		op = "mark"
	}
	for {
		o.mu.Lock()
		n := min(len(o.settled), o.opts.DeleteBatch)
		keys := o.settled[:n:n]
		o.mu.Unlock()
		if n == 0 {
			return nil
		}
		var q strings.Builder
		q.WriteString(o.q.set)
		q.WriteByte('(')
		args := make([]any, n)
		for i, k := range keys {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString(o.d.placeholder(i + 1))
			args[i] = k
		}
		q.WriteByte(')')
		if _, err := o.db.ExecContext(ctx, q.String(), args...); err != nil {
			return &OutboxError{Table: o.opts.Table, Op: op, Err: err}
		}
		o.mu.Lock()
		// Only this goroutine, or Close after it ended, takes keys from
		// the front; callbacks append at the back.
		o.settled = o.settled[n:]
		for _, k := range keys {
			o.rows[k] = rowEntry{state: rowDone}
			<-o.inFlight
		}
		o.mu.Unlock()
	}
}
