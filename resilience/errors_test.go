package resilience_test

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/resilience"
)

func TestRetryExhaustedError(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("run: %w", &resilience.RetryExhaustedError{Node: "price", Kind: resilience.ItemRetry, Attempts: 4, Err: io.ErrUnexpectedEOF})
	assert.ErrorIs(t, err, resilience.ErrRetryExhausted)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "unwraps to the last attempt's error")
	var re *resilience.RetryExhaustedError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, 4, re.Attempts)
	assert.Equal(t, `run: resilience: item_retry exhausted after 4 attempts: unexpected EOF`, err.Error())
}

func TestPanicError(t *testing.T) {
	t.Parallel()
	cause := errors.New("nil map")
	withErr := &resilience.PanicError{Value: cause, Stack: []byte("goroutine 1")}
	assert.ErrorIs(t, withErr, resilience.ErrPanic)
	assert.ErrorIs(t, withErr, cause, "unwraps to the panic value when it is an error")
	assert.Equal(t, "resilience: panic: nil map", withErr.Error())

	withString := &resilience.PanicError{Value: "boom"}
	assert.ErrorIs(t, withString, resilience.ErrPanic)
	assert.NoError(t, withString.Unwrap())
	assert.Equal(t, "resilience: panic: boom", withString.Error())
}

func TestCircuitOpenError(t *testing.T) {
	t.Parallel()
	until := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	err := &resilience.CircuitOpenError{Node: "enrich", Until: until}
	assert.ErrorIs(t, err, resilience.ErrCircuitOpen)
	assert.NotErrorIs(t, err, resilience.ErrRetryExhausted)
	assert.Equal(t, `resilience: circuit open until 2026-01-02T03:04:05Z`, err.Error())
}

func TestRetryKindString(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "item_retry", resilience.ItemRetry.String())
	assert.Equal(t, "node_restart", resilience.NodeRestart.String())
	assert.Equal(t, "node_retry", resilience.NodeRetry.String())
	assert.Equal(t, "RetryKind(0)", resilience.RetryKind(0).String())
}
