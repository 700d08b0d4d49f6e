package nats_test

// The conformance suite fails a NATS connector that gives back the
// messages of a cancelled run only after 30 s.

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/connectortest"
	"github.com/sluicehq/sluice/connector/nats"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/servicetest"
	"github.com/sluicehq/sluice/node"
)

const slowEnv = "SLUICE_SLOW_GIVEBACK"

// slowGiveBack is the sound harness, but an item that the run ended
// (Failed) is handed off for 30 s instead of nak'd at once.
type slowGiveBack struct{ conformance }

// CreateQueue leaves the stream, but deletes the consumer, which the slow
// source creates with its own MaxDeliver.
func (h slowGiveBack) CreateQueue(t testing.TB, cfg connectortest.SourceConfig) {
	h.conformance.CreateQueue(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, h.js(t).DeleteConsumer(ctx, cfg.Queue, cfg.Queue))
}

func (h slowGiveBack) NewSource(cfg connectortest.SourceConfig) (connectortest.Consumer[nats.Message], error) {
	nc := h.config(cfg)
	nc.Retry = nats.BrokerRetry{Enabled: true, Delay: time.Second, HandOffAfter: time.Millisecond}
	nc.MaxDeliver = 10
	src, err := nats.NewSource(nc)
	if err != nil {
		return connectortest.Consumer[nats.Message]{}, err
	}
	return connectortest.Consumer[nats.Message]{Source: slowSource{src}, DeadLetter: src.DeadLetter}, nil
}

type slowSource struct{ *nats.Source }

func (s slowSource) Run(ctx context.Context, out node.Emitter[nats.Message]) error {
	return s.Source.Run(ctx, slowEmitter{out})
}

type slowEmitter struct{ node.Emitter[nats.Message] }

func (e slowEmitter) EmitTracked(ctx context.Context, m nats.Message, done func(node.Outcome)) error {
	return e.Emitter.EmitTracked(ctx, m, func(o node.Outcome) {
		if o == node.Failed && m.HandOff(context.Background(), deadletter.HandOff{Delay: 30 * time.Second, Retry: 1}) == nil {
			done(node.HandedOff)
			return
		}
		done(o)
	})
}

// TestSlowGiveBack runs the suite's cancel case against the slow
// connector, in the process TestSuiteFailsSlowGiveBack starts.
func TestSlowGiveBack(t *testing.T) {
	if os.Getenv(slowEnv) == "" {
		t.Skip("run by TestSuiteFailsSlowGiveBack")
	}
	connectortest.Run(t, slowGiveBack{conformance{url: servicetest.NATS(t)}})
}

// The suite's cancel case fails a connector that gives back a cancelled
// run's messages late: Pending, which for NATS counts messages delivered
// and not acked, cannot tell, but a new source must get them within the
// case's bound (3 s), well before 30 s or the harness's AckWait (5 s), as
// docs/connectors.md says they are back at once.
func TestSuiteFailsSlowGiveBack(t *testing.T) {
	t.Parallel()
	servicetest.NATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*connectortest.CaseTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.v", "-test.count=1",
		"-test.run=^TestSlowGiveBack$/^CancelPutsBackTheRest$")
	cmd.Env = append(os.Environ(), slowEnv+"=1")
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("suite output:\n%s", out.String())
	assert.Error(t, err, "the suite fails a connector that gives back a cancelled run's messages after 30 s")
	assert.True(t, strings.Contains(out.String(), "--- FAIL: TestSlowGiveBack/CancelPutsBackTheRest"), "the cancel case catches it")
	assert.Contains(t, out.String(), "within "+(3*time.Second).String(), "with its words")
}
