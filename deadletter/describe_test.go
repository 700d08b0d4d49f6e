package deadletter_test

import (
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

type cyclicNode struct {
	Name string
	Next *cyclicNode
}

// oddItems are items that encoding/json refuses or that a naive %+v
// fallback cannot print: cycles through maps, slices and pointers,
// channels, functions, NaN, and a huge string.
func oddItems() map[string]any {
	m := map[string]any{"a": 1}
	m["self"] = m
	s := []any{1, nil}
	s[1] = s
	n := &cyclicNode{Name: "n"}
	n.Next = n
	deep := &cyclicNode{Name: "0"}
	for i := range 10000 {
		deep = &cyclicNode{Name: "x", Next: deep}
		_ = i
	}
	return map[string]any{
		"cyclic map":     m,
		"cyclic slice":   s,
		"cyclic pointer": n,
		"deep list":      deep,
		"channel":        make(chan int),
		"func":           func() {},
		"NaN":            math.NaN(),
		"infinity":       []float64{math.Inf(1)},
		"complex":        complex(1, 2),
		"huge string":    map[string]any{"s": strings.Repeat("é", 1<<20), "c": make(chan int)},
		"map of chans":   map[int]chan int{1: nil, 2: make(chan int)},
	}
}

// Every odd item lands in a dead-letter file: the line is written, read
// back, and says why the item was not encoded and what it was, within the
// bounds Describe promises.
func TestOddItemsLandInAFile(t *testing.T) {
	for name, item := range oddItems() {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "dl.jsonl")
			f, err := deadletter.OpenFile(path)
			require.NoError(t, err)
			require.NoError(t, f.Write(context.Background(), deadletter.Envelope{Item: item, ErrText: "boom", OriginNode: "n"}))
			require.NoError(t, f.Close())
			var envs []deadletter.Envelope
			for env, err := range deadletter.ReadFile(path) {
				require.NoError(t, err)
				envs = append(envs, env)
			}
			require.Len(t, envs, 1)
			env := envs[0]
			if name != "deep list" { // the deep list encodes: it has no cycle
				assert.NotEmpty(t, env.ItemError, "the encoder's refusal is kept")
				assert.NotEmpty(t, env.ItemText)
			}
			assert.LessOrEqual(t, len(env.ItemText), 4096)
			assert.True(t, utf8.ValidString(env.ItemText))
			assert.Equal(t, "boom", env.ErrText)
		})
	}
}

func TestDescribe(t *testing.T) {
	m := map[string]any{}
	m["self"] = m
	n := &cyclicNode{Name: "n"}
	n.Next = n
	for _, c := range []struct {
		item any
		want string
	}{
		{nil, "<nil>"},
		{42, "42"},
		{"text", "text"},
		{math.NaN(), "NaN"},
		{m, "map[self:<cycle>]"},
		{n, "&{Name:n Next:<cycle>}"},
		{[]int{1, 2}, "[1 2]"},
		{struct{ A, b int }{1, 2}, "{A:1 b:2}"},
		{(*int)(nil), "<nil>"},
		{[]any(nil), "[]"},
	} {
		assert.Equal(t, c.want, deadletter.Describe(c.item), "%T", c.item)
	}
	// Two fields sharing one pointer are no cycle.
	shared := &cyclicNode{Name: "s"}
	assert.Equal(t, "[&{Name:s Next:<nil>} &{Name:s Next:<nil>}]", deadletter.Describe([]*cyclicNode{shared, shared}))
	// Depth, width and length are bounded.
	deep := &cyclicNode{Name: "0"}
	for range 100 {
		deep = &cyclicNode{Name: "x", Next: deep}
	}
	assert.Equal(t, 8, strings.Count(deadletter.Describe(deep), "Name:x"))
	assert.Contains(t, deadletter.Describe(make([]int, 1000)), " ...]")
	// The cut leaves room for "...": at byte 4093, inside an é here, so it
	// goes back to the é's start.
	long := deadletter.Describe("xy" + strings.Repeat("é", 5000))
	assert.Equal(t, 4092+len("..."), len(long))
	assert.True(t, strings.HasSuffix(long, "é..."))
	assert.Len(t, deadletter.Describe(strings.Repeat("a", 5000)), 4096)
	// A NaN key keeps its value, and maps render the same every time,
	// large ones and those with keys of no basic kind too.
	assert.Equal(t, "map[NaN:lost 1:one]", deadletter.Describe(map[float64]string{math.NaN(): "lost", 1: "one"}))
	big := map[string]int{}
	for i := range 300 {
		big[strconv.Itoa(i)] = i
	}
	mixed := map[any]int{"a": 1, "b": 2, "c": 3, 1: 1, 2: 2}
	for _, m := range []any{big, mixed} {
		first := deadletter.Describe(m)
		for range 20 {
			require.Equal(t, first, deadletter.Describe(m))
		}
	}
	assert.Equal(t, "map[1:1 2:2 a:1 b:2 c:3]", deadletter.Describe(mixed))
	assert.True(t, utf8.ValidString(long))
}

// FuzzDescribe renders values built from fuzzed bytes, cyclic or not; it
// never panics and stays within its bounds.
func FuzzDescribe(f *testing.F) {
	f.Add([]byte("abc"), uint8(3), true)
	f.Add([]byte{0xff, 0xfe}, uint8(200), false)
	f.Fuzz(func(t *testing.T, data []byte, width uint8, cyclic bool) {
		root := map[string]any{}
		cur := root
		for i := range int(width) {
			next := map[string]any{"s": string(data), "f": float64(i) / 0}
			cur[string(rune('a'+i%26))] = next
			cur = next
		}
		if cyclic {
			cur["back"] = root
		}
		out := deadletter.Describe([]any{root, data, cur})
		assert.LessOrEqual(t, len(out), 4096)
	})
}

// chain is a list: deep, but not cyclic.
type chain struct {
	Next *chain `json:"next"`
	N    int    `json:"n"`
}

func deepChain(n int) *chain {
	var head *chain
	for i := range n {
		head = &chain{Next: head, N: i}
	}
	return head
}

// A list two million links deep would overflow the JSON encoder's stack,
// a fatal error no recover catches: it is refused before encoding, as too
// deep, and lands with its rendering.
func TestHugeAcyclicItemLandsInAFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dl.jsonl")
	f, err := deadletter.OpenFile(path)
	require.NoError(t, err)
	require.NoError(t, f.Write(context.Background(), deadletter.Envelope{Item: deepChain(2_000_000), ErrText: "boom"}))
	require.NoError(t, f.Close())
	for env, err := range deadletter.ReadFile(path) {
		require.NoError(t, err)
		assert.Equal(t, deadletter.ErrTooDeep.Error(), env.ItemError)
		assert.True(t, strings.HasPrefix(env.ItemText, "&{Next:&{Next:"), env.ItemText)
	}
}

type panicky struct{ ID int }

func (panicky) MarshalJSON() ([]byte, error) { panic("marshal bug") }

func TestEncodeItem(t *testing.T) {
	t.Parallel()
	raw, err := deadletter.EncodeItem(deepChain(deadletter.MaxDepth-1), nil)
	require.NoError(t, err, "as deep as encoding/json reads back")
	assert.NotEmpty(t, raw)
	_, err = deadletter.EncodeItem(deepChain(deadletter.MaxDepth+1), nil)
	assert.ErrorIs(t, err, deadletter.ErrTooDeep)
	_, err = deadletter.EncodeItem(panicky{7}, nil)
	assert.ErrorContains(t, err, "encoder panicked")
	// What encodes itself is not walked, nor are unexported or "-" fields.
	type hidden struct {
		Shown  int
		inner  *chain
		Hidden *chain `json:"-"`
	}
	raw, err = deadletter.EncodeItem(hidden{1, deepChain(2 * deadletter.MaxDepth), deepChain(2 * deadletter.MaxDepth)}, json.Marshal)
	require.NoError(t, err)
	assert.JSONEq(t, `{"Shown":1}`, string(raw))
	// The default JSON takes pointers left out for handles, not data.
	raw, err = deadletter.EncodeItem(hidden{1, deepChain(2 * deadletter.MaxDepth), deepChain(2 * deadletter.MaxDepth)}, nil)
	require.NoError(t, err)
	assert.JSONEq(t, `{"Shown":1}`, string(raw))
	// Shared parts are fine; a cycle is too deep.
	shared := deepChain(100)
	_, err = deadletter.EncodeItem([]*chain{shared, shared, shared}, nil)
	assert.NoError(t, err)
	m := map[string]any{}
	m["self"] = m
	_, err = deadletter.EncodeItem(m, nil)
	assert.ErrorIs(t, err, deadletter.ErrTooDeep)
}

type ptrMarshaled struct{ Next any }

func (n *ptrMarshaled) MarshalJSON() ([]byte, error) { return []byte(`"node"`), nil }

// Deep items that share a slice with an empty view of it, or whose
// MarshalJSON has a pointer receiver that encoding/json cannot call on a
// value in an interface, are still measured, and refused.
func TestEncodeItemSeesThroughViewsAndValueMarshalers(t *testing.T) {
	t.Parallel()
	var deep any = 0
	for range 2 * deadletter.MaxDepth {
		deep = []any{deep}
	}
	all := []any{1, deep}
	_, err := deadletter.EncodeItem(struct{ All, Pending []any }{all, all[:0]}, nil)
	assert.ErrorIs(t, err, deadletter.ErrTooDeep)

	var it any = 0
	for range 2 * deadletter.MaxDepth {
		it = ptrMarshaled{Next: it}
	}
	_, err = deadletter.EncodeItem(it, nil)
	assert.ErrorIs(t, err, deadletter.ErrTooDeep)
	// Addressable, through a pointer, the method is called: nothing to walk.
	raw, err := deadletter.EncodeItem(&ptrMarshaled{Next: it}, nil)
	require.NoError(t, err)
	assert.Equal(t, `"node"`, string(raw))
}
