package nats_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/deadletter"
)

// Without the pipeline's dead-letter sink, a source with a crash ledger
// does not open: a message that crashes the consumer would have nowhere
// to go.
func TestCrashLedgerNeedsADeadLetterSink(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	a.stream(name)
	cfg := a.config(name)
	cfg.CrashLedger = filepath.Join(t.TempDir(), "crash.ledger")
	src, err := nats.NewSource(cfg)
	require.NoError(t, err)
	err = src.Open(testContext(t))
	var ce *nats.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "CrashLedger", ce.Field)
}

// Two sources given one ledger path: the second does not open, and says
// why; it opens once the first is closed.
func TestCrashLedgerIsOneProcess(t *testing.T) {
	t.Parallel()
	a := newAdmin(t)
	name := uniqueName(t)
	a.stream(name)
	ctx := testContext(t)
	cfg := a.config(name)
	cfg.CrashLedger = filepath.Join(t.TempDir(), "crash.ledger")
	open := func() (*nats.Source, error) {
		src, err := nats.NewSource(cfg)
		require.NoError(t, err)
		src.UseDeadLetter(deadletter.NewMemory(1), deadletter.Envelope{})
		return src, src.Open(ctx)
	}
	first, err := open()
	require.NoError(t, err)
	second, err := open()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "in use by another process")
	assert.Contains(t, err.Error(), cfg.CrashLedger)
	require.NoError(t, first.Close(context.Background()))
	require.NoError(t, second.Open(ctx), "free once the first closed")
	require.NoError(t, second.Close(context.Background()))
}

// The error of a message that crashed the consumer matches ErrCrashed and
// ErrPoison, so that Source.DeadLetter passes it on unretried.
func TestCrashErrorIsPoison(t *testing.T) {
	t.Parallel()
	err := nats.CrashError("nats: poison message: message 7 of stream \"s\" crashed the consumer")
	assert.ErrorIs(t, err, nats.ErrCrashed)
	assert.ErrorIs(t, err, nats.ErrPoison)
	assert.NotErrorIs(t, errors.New("other"), nats.ErrCrashed)
}
