package httpretry_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/resilience"
	"github.com/sluicehq/sluice/resilience/httpretry"
)

// Finding 3: the package doc says "A cancelled context stays what it
// is: permanent, never retried, and not the item's fault (see
// resilience.IsBlameless)", and getting-started step 9 "A call whose
// context was cancelled is never retried nor counted against its item".
// Go's transport (1.2x) returns context.Cause of the request's context:
// a context cancelled with a cause (context.WithCancelCause, errgroup,
// signal.NotifyContext in Go 1.26, whose cause names the signal) while
// the call is in flight gives url.Error{Err: cause}. callError only
// recognises context.Canceled, so the error is neither a cancellation
// nor blameless: the item is blamed (Rejected, dead-lettered) for a
// cancellation it did not cause.
//
// The fix: Check sees only the error, which is then the cause alone, and
// cannot tell it from a transport's error; httpretry.Do sends the request
// itself and asks its context. The test calls Do (Check's doc says what
// Check makes of it, and TestCheckCannotSeeACause shows it).
func TestReviewCancelledWithACauseIsBlameless(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		close(started)
		<-release
	}))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithCancelCause(t.Context())
	errShutdown := errors.New("interrupt signal received")
	go func() {
		<-started
		cancel(errShutdown) // in flight
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	resp, err := httpretry.Do(srv.Client(), req)
	require.Nil(t, resp)
	require.Error(t, err)
	require.Error(t, ctx.Err())
	assert.False(t, resilience.IsTransient(err), "never retried")
	assert.True(t, resilience.IsBlameless(err), "not the item's fault: %v", err)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, errShutdown, "the cause is kept")
}
