package slogobserver_test

import (
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/observer/slogobserver"
)

// An item the dead-letter sink gave back to its broker is no dead letter:
// it is logged at INFO under a message of its own, and summed up apart
// from the dead letters of the same node and reason.
func TestBrokerRetriesAreLoggedApartFromDeadLetters(t *testing.T) {
	t.Parallel()
	obs, h, _ := quiet(t)
	for i := range 3 {
		retried := deadLetter("handle", "m"+strconv.Itoa(i), orderErr(i), time.Duration(i)*time.Millisecond)
		retried.BrokerRetry = true
		obs.OnDeadLetter(retried)
	}
	obs.OnDeadLetter(deadLetter("handle", "m9", orderErr(9), 5*time.Millisecond))
	got := h.lines()
	require.Len(t, got, 2, "the first of each group at once")
	assert.Equal(t, line{
		"level": "INFO", "msg": slogobserver.MsgBrokerRetry, "time": "0s", "node": "handle", "key": "m0",
		"origin_node": "handle", "attempts": "4", "error": "order 0: HTTP 400", "reason": "order #: HTTP #",
	}, got[0])
	assert.Equal(t, "WARN", got[1]["level"])
	assert.Equal(t, slogobserver.MsgDeadLettered, got[1]["msg"])

	obs.Flush()
	got = h.lines()
	require.Len(t, got, 3, "one summary: the two later broker retries")
	assert.Equal(t, line{
		"level": "INFO", "msg": slogobserver.MsgBrokerRetries, "time": "2ms", "node": "handle", "origin_node": "handle",
		"count": "2", "reason": "order #: HTTP #", "last_key": "m2", "last_error": "order 2: HTTP 400",
	}, got[2])
}

// Below INFO's level, broker retries cost one Enabled call and log
// nothing; dead letters still log at WARN.
func TestBrokerRetriesFollowTheLevel(t *testing.T) {
	t.Parallel()
	h := newRecorder(slog.LevelWarn)
	obs := slogobserver.New(slog.New(h), slogobserver.WithSummaryEvery(0))
	retried := deadLetter("handle", "m0", orderErr(0), 0)
	retried.BrokerRetry = true
	obs.OnDeadLetter(retried)
	obs.OnDeadLetter(deadLetter("handle", "m1", orderErr(1), 0))
	got := h.lines()
	require.Len(t, got, 1)
	assert.Equal(t, slogobserver.MsgDeadLettered, got[0]["msg"])
}
