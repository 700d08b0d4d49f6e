package sql

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/resilience"
)

// A row is a row read: its key and its item, or, for a row that does not
// scan into the item, why and the values of its columns.
type row[T any] struct {
	key    int64
	item   T
	bad    *OutboxError
	values map[string]any
}

// page reads the rows after key after, once it forgot the rows deleted
// before, and the rows whose items failed PollInterval ago or more: a
// row deleted while the read runs may be in it, and is still known to be
// emitted.
func (o *OutboxSource[T]) page(ctx context.Context, after int64) ([]row[T], error) {
	o.mu.Lock()
	now := o.opts.Clock.Now()
	for k, e := range o.rows {
		if e.state == rowDone || (e.state == rowFailed && now.Sub(e.at) >= o.opts.PollInterval) {
			delete(o.rows, k)
		}
	}
	o.mu.Unlock()
	readErr := func(err error) error {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return &OutboxError{Table: o.opts.Table, Op: "read", After: after, Err: err}
	}
	q, args := o.q.read, []any{after}
	if after == math.MinInt64 {
		q, args = o.q.first, nil
	}
	rs, err := o.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, readErr(err)
	}
	defer rs.Close()
	page := make([]row[T], 0, o.opts.PageSize)
	dst := make([]any, 1+len(o.q.cols))
	for rs.Next() {
		page = append(page, row[T]{})
		r := &page[len(page)-1]
		dst[0] = &r.key
		o.scan.dests(&r.item, dst[1:])
		if err := rs.Scan(dst...); err != nil {
			var zero T
			r.item = zero
			if err := o.badRow(rs, r, dst, err); err != nil {
				return nil, readErr(err)
			}
			continue
		}
		o.scan.done(&r.item)
	}
	if err := rs.Err(); err != nil {
		return nil, readErr(err)
	}
	return page, nil
}

// badRow fills r, a row that did not scan into dst with err: its key,
// the values of its columns, and which column failed. It returns an
// error when the row cannot even be told by its key, which fails Run.
func (o *OutboxSource[T]) badRow(rs interface{ Scan(...any) error }, r *row[T], dst []any, err error) error {
	holders := make([]any, len(dst))
	all := make([]any, len(dst))
	for i := range all {
		all[i] = &holders[i]
	}
	if err := rs.Scan(all...); err != nil {
		return err
	}
	try := append([]any(nil), all...)
	try[0] = &r.key
	if err := rs.Scan(try...); err != nil {
		// A key that is not an integer cannot be deleted by: the table
		// is not an outbox table this source can read.
		return fmt.Errorf("the key column %q: %w", o.opts.Key, err)
	}
	bad := &OutboxError{Table: o.opts.Table, Op: "scan", Key: r.key, Err: err}
	for i := 1; i < len(dst); i++ {
		try := append([]any(nil), all...)
		try[i] = dst[i]
		if err := rs.Scan(try...); err != nil {
			bad.Column, bad.Err = o.q.cols[i-1], err
			break
		}
	}
	r.bad = bad
	r.values = make(map[string]any, len(holders))
	r.values[o.opts.Key] = r.key
	for i, c := range o.q.cols {
		v := holders[1+i]
		if b, ok := v.([]byte); ok && utf8.Valid(b) {
			v = string(b) // a dead-letter file shows a string as text, bytes as base64
		}
		r.values[c] = v
	}
	return nil
}

// deadLetter writes bad row r to the pipeline's dead-letter sink and
// settles it, so that it is deleted; the row holds a slot of MaxInFlight.
// Without a sink, or when the sink refuses it, it returns the error that
// ends Run, and the row stays.
func (o *OutboxSource[T]) deadLetter(ctx context.Context, r row[T]) error {
	sink, env := o.letters.Letter(r.values, deadletter.TypeOf(r.values), r.bad, strconv.FormatInt(r.key, 10), o.opts.Clock.Now())
	if sink == nil {
		// It would not scan the next time either.
		return resilience.MarkPermanent(fmt.Errorf("%w (the pipeline has no dead-letter sink to take the row)", r.bad))
	}
	env.FirstFailure = env.LastFailure
	if err := sink.Write(ctx, env); err != nil {
		return fmt.Errorf("sql: outbox %s: dead-letter the row with key %d: %w", o.opts.Table, r.key, err)
	}
	o.done(r.key)(node.DeadLettered)
	return nil
}
