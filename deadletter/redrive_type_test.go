package deadletter_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// line is the item of a parse step, dead-lettered into the same file as
// the orders of a later step.
type line struct {
	N    int    `json:"n"`
	Text string `json:"text"`
}

// mixedFile holds orders dead-lettered by "price" and lines dead-lettered
// by "parse", interleaved.
func mixedFile(t *testing.T) string {
	t.Helper()
	var envs []deadletter.Envelope
	for i := range 6 {
		if i%2 == 0 {
			envs = append(envs, sampleEnvelope(i))
			continue
		}
		env := sampleEnvelope(i)
		env.Item = line{N: i, Text: "garbled,row"}
		env.OriginNode, env.DecisionNode = "parse", "parse"
		envs = append(envs, env)
	}
	return writeEnvelopes(t, envs...)
}

// A re-drive never turns an item into another: a line in a file of
// orders is refused, not decoded into a zero order.
func TestSourceRefusesAnItemOfAnotherType(t *testing.T) {
	t.Parallel()
	path := mixedFile(t)
	var out collector[order]
	err := deadletter.Source[order](path).Run(t.Context(), &out)
	require.ErrorIs(t, err, deadletter.ErrUndecodableItem)
	var le *deadletter.LineError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, 2, le.Line)
	assert.Contains(t, err.Error(), "the item is a github.com/sluicehq/sluice/deadletter_test.line, not a github.com/sluicehq/sluice/deadletter_test.order")
	assert.Equal(t, []order{{0, "9.99"}}, out.items)

	// Skipping bad lines reports each line, and emits only orders.
	var skipped []int
	out = collector[order]{}
	require.NoError(t, deadletter.Source[order](path, deadletter.WithSkipBadLines(func(le *deadletter.LineError) {
		skipped = append(skipped, le.Line)
	})).Run(t.Context(), &out))
	assert.Equal(t, []int{2, 4, 6}, skipped)
	assert.Equal(t, []order{{0, "9.99"}, {2, "9.99"}, {4, "9.99"}}, out.items)
}

// WithDecisionNodes re-drives one node's dead letters and passes over the rest.
func TestSourceOnlyNodes(t *testing.T) {
	t.Parallel()
	path := mixedFile(t)
	var orders collector[order]
	require.NoError(t, deadletter.Source[order](path, deadletter.WithDecisionNodes("price")).Run(t.Context(), &orders))
	assert.Equal(t, []order{{0, "9.99"}, {2, "9.99"}, {4, "9.99"}}, orders.items)
	var lines collector[line]
	require.NoError(t, deadletter.Source[line](path, deadletter.WithDecisionNodes("parse")).Run(t.Context(), &lines))
	assert.Equal(t, []line{{1, "garbled,row"}, {3, "garbled,row"}, {5, "garbled,row"}}, lines.items)
}

// A file written before envelopes named their item's type is decoded
// strictly: fields an order does not have are an error, and so is a null
// item for a type that cannot be nil.
func TestSourceDecodesOldFilesStrictly(t *testing.T) {
	t.Parallel()
	path := mixedFile(t)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var old []string
	for l := range strings.Lines(string(data)) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m))
		require.NotEmpty(t, m["item_type"], "the file sink names the item's type")
		delete(m, "item_type")
		b, err := json.Marshal(m)
		require.NoError(t, err)
		old = append(old, string(b))
	}
	old = append(old, `{"item":null,"error":"x","origin_node":"price","decision_node":"price","history":null}`)
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(old, "\n")+"\n"), 0o600))

	var skipped []string
	var out collector[order]
	require.NoError(t, deadletter.Source[order](path, deadletter.WithSkipBadLines(func(le *deadletter.LineError) {
		skipped = append(skipped, le.Err.Error())
	})).Run(t.Context(), &out))
	assert.Equal(t, []order{{0, "9.99"}, {2, "9.99"}, {4, "9.99"}}, out.items)
	require.Len(t, skipped, 4)
	for _, s := range skipped[:3] {
		assert.Contains(t, s, `unknown field "n"`)
	}
	assert.Contains(t, skipped[3], "the item is null")

	// A pointer type takes a null item: it was a nil pointer.
	var ptrs collector[*order]
	require.NoError(t, deadletter.Source[*order](path, deadletter.WithDecisionNodes("price"), deadletter.WithSkipBadLines(func(*deadletter.LineError) {})).Run(t.Context(), &ptrs))
	require.Len(t, ptrs.items, 4)
	assert.Nil(t, ptrs.items[3])
}

func TestTypeOf(t *testing.T) {
	assert.Equal(t, "", deadletter.TypeOf(nil))
	assert.Equal(t, "github.com/sluicehq/sluice/deadletter_test.order", deadletter.TypeOf(order{}))
	assert.Equal(t, "*github.com/sluicehq/sluice/deadletter_test.order", deadletter.TypeOf(&order{}))
	assert.Equal(t, "[]int", deadletter.TypeOf([]int{}))
	assert.Equal(t, "string", deadletter.TypeOf(""))
}

// Source[any] takes an item as it was written: a large number is not
// rounded through a float64.
func TestSourceAnyKeepsLargeNumbers(t *testing.T) {
	t.Parallel()
	env := sampleEnvelope(1)
	env.Item = map[string]int64{"id": 1<<60 + 1}
	path := writeEnvelopes(t, env)
	var out collector[any]
	require.NoError(t, deadletter.Source[any](path).Run(t.Context(), &out))
	require.Len(t, out.items, 1)
	assert.Equal(t, "map[id:1152921504606846977]", fmt.Sprint(out.items[0]))
}

// WithDecisionNodes with no node, or with nodes none of the file's envelopes comes
// from (a misspelling), is an error, not a re-drive of nothing.
func TestSourceOnlyNodesThatMatchNothing(t *testing.T) {
	t.Parallel()
	path := mixedFile(t)
	var out collector[order]
	err := deadletter.Source[order](path, deadletter.WithDecisionNodes()).Run(t.Context(), &out)
	require.ErrorContains(t, err, "WithDecisionNodes: no node named")
	err = deadletter.Source[order](path, deadletter.WithDecisionNodes("prcie")).Run(t.Context(), &out)
	require.ErrorContains(t, err, "WithDecisionNodes(prcie): no envelope comes from these nodes; the file's come from parse, price")
	assert.Empty(t, out.items)
	// Lists add up.
	var lines collector[line]
	require.NoError(t, deadletter.Source[line](path, deadletter.WithDecisionNodes("nope"), deadletter.WithDecisionNodes("parse")).Run(t.Context(), &lines))
	assert.Len(t, lines.items, 3)
}
