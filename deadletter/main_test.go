package deadletter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/resilience"
)

func TestMain(m *testing.M) {
	// The crash tests run this binary again as the child they kill.
	if os.Getenv(crashChildEnv) != "" {
		os.Exit(crashChild())
	}
	if os.Getenv(replayChildEnv) != "" {
		os.Exit(replayChild())
	}
	goleak.VerifyTestMain(m)
}

// order is the item type of the tests.
type order struct {
	ID    int    `json:"id"`
	Total string `json:"total"`
}

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// sampleEnvelope returns an envelope with every field set, numbered i.
func sampleEnvelope(i int) deadletter.Envelope {
	t0 := epoch.Add(time.Duration(i) * time.Second)
	return deadletter.Envelope{
		Item:          order{ID: i, Total: "9.99"},
		Err:           fmt.Errorf("price: upstream 503 for order %d", i),
		Pipeline:      "orders",
		RunID:         "run-1",
		OriginNode:    "price",
		DecisionNode:  "price",
		CorrelationID: fmt.Sprintf("order-%d", i),
		Attempts:      2,
		History: []deadletter.Attempt{
			// Delay is the wait chosen after a call: 200 ms after the first,
			// none after the last.
			{Time: t0, Layer: resilience.ItemRetry, Delay: 200 * time.Millisecond, Err: "upstream 503"},
			{Time: t0.Add(200 * time.Millisecond), Layer: resilience.ItemRetry, Retry: 1, Err: "upstream 503"},
		},
		FirstFailure: t0,
		LastFailure:  t0.Add(200 * time.Millisecond),
	}
}

// writeFile writes envelopes 0..n-1 to a new file in a temporary
// directory and returns its path.
func writeFile(t testing.TB, n int, opts ...deadletter.FileOption) string {
	t.Helper()
	path := t.TempDir() + "/dlq.jsonl"
	f, err := deadletter.OpenFile(path, opts...)
	require.NoError(t, err)
	for i := range n {
		require.NoError(t, f.Write(context.Background(), sampleEnvelope(i)))
	}
	require.NoError(t, f.Close())
	return path
}

// readBack collects what ReadFile yields.
func readBack(t testing.TB, path string) ([]deadletter.Envelope, []error) {
	t.Helper()
	var envs []deadletter.Envelope
	var errs []error
	for env, err := range deadletter.ReadFile(path) {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		envs = append(envs, env)
	}
	return envs, errs
}

// itemIDs decodes the order ID of every envelope.
func itemIDs(t testing.TB, envs []deadletter.Envelope) []int {
	t.Helper()
	ids := make([]int, len(envs))
	for i, env := range envs {
		var o order
		require.NoError(t, jsonUnmarshal(env.Item, &o))
		ids[i] = o.ID
	}
	return ids
}

// waitUntil spins until cond holds. It yields the processor instead of
// sleeping, and gives up after ten seconds of real time.
func waitUntil(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		runtime.Gosched()
	}
}

// jsonUnmarshal decodes an Item read back from a file.
func jsonUnmarshal(item any, v any) error {
	raw, ok := item.(json.RawMessage)
	if !ok {
		return fmt.Errorf("item is %T, not json.RawMessage", item)
	}
	return json.Unmarshal(raw, v)
}
