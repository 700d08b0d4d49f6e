package connectortest

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
)

// The crash case's consumer process writes every dead letter it is given,
// and deduplicates only stored keys: a connector that dead-letters a
// crashing message twice (in two processes, or twice in one), or condemns
// a neighbour after it was stored, leaves that in the files the case
// checks ("dead-lettered once", "dead-lettered and stored"). The source
// here does both.
func TestCrashCaseSeesEveryDeadLetter(t *testing.T) {
	dir := t.TempDir()
	out, dead, crashes := filepath.Join(dir, "stored"), filepath.Join(dir, "dead"), filepath.Join(dir, "crashes")
	t.Setenv(childQueue, "q")
	t.Setenv(childPrefetch, "16")
	t.Setenv(childMaxDeliv, "1")
	t.Setenv(childTotal, "2")
	t.Setenv(childOut, out)
	t.Setenv(childDead, dead)
	t.Setenv(childCrashes, crashes)
	t.Setenv(childLedger, filepath.Join(dir, "ledger"))
	require.NoError(t, crashChild[string](crashCaseHarness{}))

	letters := readDead(t, dead)
	t.Logf("stored %v, dead letters as the case reads them %v", readKeys(t, out), letters)
	assert.Len(t, letters["crash-exit-1"], 2, "the connector dead-lettered crash-exit-1 twice")
	assert.Len(t, letters["good-1"], 1, "the connector dead-lettered the neighbour good-1 after storing it")
}

type crashCaseHarness struct{}

func (crashCaseHarness) Addr() string                           { return "" }
func (crashCaseHarness) CreateQueue(testing.TB, SourceConfig)   {}
func (crashCaseHarness) Publish(testing.TB, string, ...Message) {}
func (crashCaseHarness) Pending(testing.TB, string) int         { return 0 }
func (crashCaseHarness) NewPublisher(string) (node.Sink[Message], error) {
	return nil, errors.New("none")
}
func (crashCaseHarness) Message(m string) Message { return Message{Key: m} }
func (crashCaseHarness) NewSource(SourceConfig) (Consumer[string], error) {
	return Consumer[string]{Source: &crashCaseSource{}}, nil
}

// crashCaseSource stores good-1, then dead-letters it as a crash culprit,
// then dead-letters crash-exit-1 twice: what a wrong connector would do.
type crashCaseSource struct{ dl deadletter.Sink }

func (s *crashCaseSource) UseDeadLetter(sink deadletter.Sink, _ deadletter.Envelope) { s.dl = sink }

func (s *crashCaseSource) Run(ctx context.Context, out node.Emitter[string]) error {
	stored := make(chan struct{})
	if err := out.EmitTracked(ctx, "good-1", func(node.Outcome) { close(stored) }); err != nil {
		return err
	}
	<-stored
	for _, k := range []string{"good-1", "crash-exit-1", "crash-exit-1"} {
		if err := s.dl.Write(ctx, deadletter.Envelope{Item: k, Err: errors.New("crashed the consumer"), ErrText: "crashed the consumer"}); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return nil
}
