// Package slogobserver logs what Sluice pipelines do as structured
// records on a [*slog.Logger].
//
// Levels follow what an operator must act on:
//
//	DEBUG  a retry about to wait
//	INFO   a node started, completed, or stopped because the run ended
//	WARN   retries exhausted, an item dead-lettered, an item dropped
//	       (its node's failure action is skip), a circuit breaker transition
//	ERROR  a node failed
//
// Every record carries the attributes pipeline, run_id and node, and its
// time is the event's, from the pipeline's clock. Records below the
// logger's level cost one Enabled call: a pipeline that fails nothing logs
// only its nodes starting and completing.
package slogobserver

import (
	"context"
	"log/slog"

	"github.com/sluicehq/sluice/observer"
)

// The messages of the records an Observer writes.
const (
	MsgNodeStarted      = "node started"
	MsgNodeCompleted    = "node completed"
	MsgNodeStopped      = "node stopped"
	MsgNodeFailed       = "node failed"
	MsgRetry            = "retry"
	MsgRetriesExhausted = "retries exhausted"
	MsgDeadLettered     = "item dead-lettered"
	MsgDropped          = "item dropped"
	MsgCircuitChanged   = "circuit breaker changed state"
)

// An Observer writes a record for every event of the pipelines it is given
// to. It is safe for concurrent use when its logger's handler is, as
// handlers must be. Create one with [New].
type Observer struct {
	h slog.Handler
}

// New returns an Observer that logs on l; a nil l is [slog.Default].
func New(l *slog.Logger) *Observer {
	if l == nil {
		l = slog.Default()
	}
	return &Observer{h: l.Handler()}
}

// OnNodeStarted logs at INFO.
func (o *Observer) OnNodeStarted(e observer.NodeEvent) {
	o.log(slog.LevelInfo, MsgNodeStarted, e.Event)
}

// OnNodeCompleted logs a node that completed without error at INFO. A node
// that stopped because the run ended otherwise (another node failed, or
// the caller cancelled) logs "node stopped" at INFO, with the cause as
// error: the node that failed logs that failure itself, once. Any other
// error, the caller's deadline included, logs "node failed" at ERROR.
func (o *Observer) OnNodeCompleted(e observer.NodeEvent) {
	switch {
	case e.Err == nil:
		o.log(slog.LevelInfo, MsgNodeCompleted, e.Event)
	case e.Stopped:
		o.log(slog.LevelInfo, MsgNodeStopped, e.Event, slog.Any("error", e.Err))
	default:
		o.log(slog.LevelError, MsgNodeFailed, e.Event, slog.Any("error", e.Err))
	}
}

// OnRetry logs at DEBUG, with kind, attempt, delay and error.
func (o *Observer) OnRetry(e observer.RetryEvent) {
	if !o.enabled(slog.LevelDebug) {
		return
	}
	o.log(slog.LevelDebug, MsgRetry, e.Event, slog.String("kind", e.Kind.String()), slog.Int("attempt", e.Attempt),
		slog.Duration("delay", e.Delay), slog.Any("error", e.Err))
}

// OnRetryExhausted logs at WARN, with kind, attempts, limit and error.
func (o *Observer) OnRetryExhausted(e observer.RetryExhaustedEvent) {
	if !o.enabled(slog.LevelWarn) {
		return
	}
	o.log(slog.LevelWarn, MsgRetriesExhausted, e.Event, slog.String("kind", e.Kind.String()), slog.Int("attempts", e.Attempts),
		slog.String("limit", e.Limit.String()), slog.Any("error", e.Err))
}

// OnDeadLetter logs at WARN, with origin_node, attempts and error.
func (o *Observer) OnDeadLetter(e observer.DeadLetterEvent) {
	if !o.enabled(slog.LevelWarn) {
		return
	}
	o.log(slog.LevelWarn, MsgDeadLettered, e.Event, slog.String("origin_node", e.OriginNode), slog.Int("attempts", e.Attempts),
		slog.Any("error", e.Err))
}

// OnDrop logs at WARN, with attempts and error. A dropped item is data the
// pipeline did not deliver, as a dead-lettered one, but kept nowhere: WARN
// makes it as visible. Raise the handler's level for nodes that skip
// items by design and in numbers.
func (o *Observer) OnDrop(e observer.DropEvent) {
	if !o.enabled(slog.LevelWarn) {
		return
	}
	o.log(slog.LevelWarn, MsgDropped, e.Event, slog.Int("attempts", e.Attempts), slog.Any("error", e.Err))
}

// OnCircuitStateChanged logs at WARN, with from, to and generation.
func (o *Observer) OnCircuitStateChanged(e observer.CircuitEvent) {
	if !o.enabled(slog.LevelWarn) {
		return
	}
	o.log(slog.LevelWarn, MsgCircuitChanged, e.Event, slog.String("from", e.From.String()), slog.String("to", e.To.String()),
		slog.Uint64("generation", e.Generation))
}

func (o *Observer) enabled(level slog.Level) bool {
	return o.h.Enabled(context.Background(), level)
}

// log writes one record at the event's time. Errors of the handler are
// dropped, as slog.Logger drops them.
func (o *Observer) log(level slog.Level, msg string, e observer.Event, attrs ...slog.Attr) {
	ctx := context.Background()
	if !o.h.Enabled(ctx, level) {
		return
	}
	r := slog.NewRecord(e.Time, level, msg, 0)
	r.AddAttrs(slog.String("pipeline", e.Pipeline), slog.String("run_id", e.RunID), slog.String("node", e.Node))
	r.AddAttrs(attrs...)
	_ = o.h.Handle(ctx, r)
}

var _ observer.Observer = (*Observer)(nil)
