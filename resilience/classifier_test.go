package resilience_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/resilience"
)

type statusError struct{ code int }

func (e statusError) Error() string   { return fmt.Sprintf("status %d", e.code) }
func (e statusError) StatusCode() int { return e.code }

type temporaryError struct{ temporary bool }

func (e temporaryError) Error() string   { return "temporary?" }
func (e temporaryError) Temporary() bool { return e.temporary }

type timeoutError struct{ timeout bool }

func (e timeoutError) Error() string   { return "net timeout?" }
func (e timeoutError) Timeout() bool   { return e.timeout }
func (e timeoutError) Temporary() bool { return false }

var _ net.Error = timeoutError{}

var errBusy = errors.New("busy")

func TestDefaultClassifier(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		err       error
		transient bool
	}{
		{"nil", nil, false},
		{"plain error", errors.New("bad input"), false},
		{"deadline exceeded", context.DeadlineExceeded, true},
		{"os deadline", os.ErrDeadlineExceeded, true},
		{"net timeout", timeoutError{timeout: true}, true},
		{"net error without timeout", timeoutError{timeout: false}, false},
		{"connection refused", syscall.ECONNREFUSED, true},
		{"connection reset", syscall.ECONNRESET, true},
		{"connection aborted", syscall.ECONNABORTED, true},
		{"broken pipe", syscall.EPIPE, true},
		{"timed out", syscall.ETIMEDOUT, true},
		{"other errno", syscall.ENOENT, false},
		{"refused inside a net.OpError", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{"unexpected EOF", io.ErrUnexpectedEOF, true},
		{"EOF", io.EOF, false},
		{"status 408", statusError{408}, true},
		{"status 429", statusError{429}, true},
		{"status 500", statusError{500}, true},
		{"status 503", statusError{503}, true},
		{"status 599", statusError{599}, true},
		{"status 400", statusError{400}, false},
		{"status 404", statusError{404}, false},
		{"status 600", statusError{600}, false},
		{"temporary true", temporaryError{true}, true},
		{"temporary false", temporaryError{false}, false},
		{"marked transient", resilience.MarkTransient(errors.New("x")), true},
		{"marked permanent over a transient one", resilience.MarkPermanent(syscall.ECONNRESET), false},
		{"marked retried over a transient one", resilience.MarkRetried(syscall.ECONNRESET, 3), false},
		{"canceled", context.Canceled, false},
		{"panic", &resilience.PanicError{Value: syscall.ECONNRESET}, false},
		{"exhausted", &resilience.RetryExhaustedError{Node: "n", Kind: resilience.ItemRetry, Attempts: 4, Err: syscall.ECONNRESET}, false},
		{"circuit open", &resilience.CircuitOpenError{Node: "n"}, false},
		{"wrapped with %w", fmt.Errorf("calling api: %w", statusError{503}), true},
		{"deep in a join", errors.Join(errors.New("a"), fmt.Errorf("b: %w", io.ErrUnexpectedEOF)), true},
		{"permanent anywhere in a join wins", errors.Join(syscall.ECONNRESET, resilience.MarkPermanent(errors.New("p"))), false},
		{"multiple %w", fmt.Errorf("%w and %w", errors.New("a"), syscall.ETIMEDOUT), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.transient, resilience.IsTransient(tt.err))
			assert.Equal(t, tt.transient, resilience.Classifier{}.IsTransient(tt.err))
		})
	}
}

func TestClassifierUserRulesRunFirstInOrder(t *testing.T) {
	t.Parallel()
	c := resilience.Classifier{}.
		PermanentIs(syscall.ECONNREFUSED). // overrides a default transient
		TransientIs(errBusy).
		PermanentIs(errBusy) // never reached for errBusy: the rule before matched

	assert.False(t, c.IsTransient(syscall.ECONNREFUSED))
	assert.True(t, c.IsTransient(fmt.Errorf("call: %w", errBusy)))
	assert.True(t, c.IsTransient(syscall.ECONNRESET), "default rules still apply after user rules")
	assert.False(t, c.IsTransient(errors.New("other")))

	// The first rule that matches anything in the tree decides, even when a
	// later rule would match an error closer to the top.
	joined := errors.Join(errBusy, syscall.ECONNREFUSED)
	assert.False(t, c.IsTransient(joined), "PermanentIs(ECONNREFUSED) was added first")
}

func TestClassifierIsImmutable(t *testing.T) {
	t.Parallel()
	base := resilience.Classifier{}.TransientIs(errBusy)
	a := base.PermanentIs(syscall.ECONNRESET)
	b := base.TransientIs(io.EOF)

	assert.False(t, a.IsTransient(syscall.ECONNRESET))
	assert.True(t, b.IsTransient(syscall.ECONNRESET), "a's rule must not leak into b")
	assert.True(t, b.IsTransient(io.EOF))
	assert.False(t, a.IsTransient(io.EOF), "b's rule must not leak into a")
	assert.False(t, base.IsTransient(io.EOF))
	assert.True(t, base.IsTransient(syscall.ECONNRESET))
}

func TestClassifierAsRules(t *testing.T) {
	t.Parallel()
	c := resilience.TransientAs[statusError](resilience.Classifier{}, func(e statusError) bool { return e.code == 409 })
	c = resilience.PermanentAs[statusError](c) // every other statusError, even 503
	assert.True(t, c.IsTransient(fmt.Errorf("put: %w", statusError{409})))
	assert.False(t, c.IsTransient(statusError{503}))
	assert.True(t, c.IsTransient(syscall.ECONNRESET))

	// The predicate sees each error of the tree: the second element matches.
	assert.True(t, c.IsTransient(errors.Join(errors.New("x"), statusError{409})))
}

func TestClassifierPredicateRules(t *testing.T) {
	t.Parallel()
	var seen []string
	c := resilience.Classifier{}.Transient(func(err error) bool {
		seen = append(seen, err.Error())
		return err.Error() == "inner"
	})
	outer := fmt.Errorf("outer: %w", errors.New("inner"))
	assert.True(t, c.IsTransient(outer))
	assert.Equal(t, []string{"outer: inner", "inner"}, seen, "the rule sees every error of the chain, outermost first")
}

func TestAllTransient(t *testing.T) {
	t.Parallel()
	c := resilience.AllTransient()
	assert.True(t, c.IsTransient(errors.New("anything")))
	assert.True(t, c.IsTransient(io.EOF))
	assert.False(t, c.IsTransient(context.Canceled))
	assert.False(t, c.IsTransient(&resilience.PanicError{Value: "boom"}))
	assert.False(t, c.IsTransient(resilience.MarkPermanent(errors.New("p"))))
	assert.False(t, c.IsTransient(&resilience.RetryExhaustedError{Err: errors.New("x")}))

	// User rules still come before AllTransient.
	assert.False(t, c.PermanentIs(io.EOF).IsTransient(io.EOF))
}

func TestAlwaysPermanentBeatsUserRules(t *testing.T) {
	t.Parallel()
	c := resilience.Classifier{}.Transient(func(error) bool { return true })
	assert.False(t, c.IsTransient(&resilience.RetryExhaustedError{Err: syscall.ECONNRESET}),
		"an outer layer must never multiply an inner layer's retries")
	assert.False(t, c.IsTransient(context.Canceled))
	assert.False(t, c.IsTransient(&resilience.CircuitOpenError{}))
	assert.False(t, c.IsTransient(resilience.MarkRetried(errors.New("x"), 2)))
	assert.True(t, c.IsTransient(errors.New("x")))
}

func TestPipelineCancellationIsNeverTransient(t *testing.T) {
	t.Parallel()
	live, stop := context.WithCancel(context.Background())
	defer stop()
	done, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("node failed"))

	// A deadline of the user's own, while the pipeline's context is live, is
	// transient.
	assert.True(t, resilience.Classifier{}.IsTransientContext(live, context.DeadlineExceeded))
	// Once the pipeline's context is done, nothing is transient, not even
	// under AllTransient: the run is ending.
	for _, c := range []resilience.Classifier{{}, resilience.AllTransient()} {
		assert.False(t, c.IsTransientContext(done, context.DeadlineExceeded))
		assert.False(t, c.IsTransientContext(done, context.Canceled))
		assert.False(t, c.IsTransientContext(done, syscall.ECONNRESET))
	}
}

func TestMarksKeepTheErrorAndNil(t *testing.T) {
	t.Parallel()
	base := errors.New("base")
	for _, err := range []error{resilience.MarkTransient(base), resilience.MarkPermanent(base), resilience.MarkRetried(base, 3)} {
		assert.ErrorIs(t, err, base)
		assert.Equal(t, "base", err.Error())
	}
	assert.Nil(t, resilience.MarkTransient(nil))
	assert.Nil(t, resilience.MarkPermanent(nil))
	assert.Nil(t, resilience.MarkRetried(nil, 1))

	n, ok := resilience.RetriedAttempts(fmt.Errorf("publish: %w", resilience.MarkRetried(base, 3)))
	assert.True(t, ok)
	assert.Equal(t, 3, n)
	_, ok = resilience.RetriedAttempts(base)
	assert.False(t, ok)
}

func TestNilRuleIsMisuse(t *testing.T) {
	t.Parallel()
	assert.PanicsWithValue(t, "sluice: classifier rule with a nil function", func() {
		resilience.Classifier{}.Transient(nil)
	})
}
