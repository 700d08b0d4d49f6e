package deadletter_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

// An item the JSON encoding refuses for several bad parts, in maps whose
// order Go randomises, is one letter: the error that names the first bad
// part is part of the letter's key, and must be the same each time.
func TestLossyItemWithSeveralBadPartsIsOneLetter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	f, err := deadletter.OpenFile(path)
	require.NoError(t, err)
	defer f.Close()
	for range 40 {
		env := positioned(1)
		env.Item = map[string]any{"a": "\xff", "b": []string{"\xfe"}, "c": map[string]string{"\xfd": "x"},
			"d": map[string]any{"x": "\xfc", "y": []any{"\xfb"}}}
		env.ItemType = ""
		require.NoError(t, f.Write(context.Background(), env))
	}
	s := f.Stats()
	assert.Equal(t, int64(1), s.Writes, "one item at one position: one letter")
	assert.Equal(t, int64(39), s.Duplicates)
}

// EncodeItem names the same bad part of an item every time.
func TestEncodeItemNamesTheSameBadPartEachTime(t *testing.T) {
	item := map[string]any{"a": map[string]string{"\xff": "x"}, "b": []string{"\xfe"}, "c": "\xfd", "d": 1}
	_, first := deadletter.EncodeItem(item, nil)
	require.Error(t, first)
	require.True(t, errors.Is(first, deadletter.ErrLossy), "%v", first)
	for range 100 {
		_, err := deadletter.EncodeItem(item, nil)
		require.Error(t, err)
		assert.Equal(t, first.Error(), err.Error())
	}
}

type withChan struct {
	ID   int
	Done chan struct{}
	F    func()
}

// An item that cannot be encoded for a channel or func in it is one
// letter across runs: a replay decodes it anew, with a channel at another
// address, and its text must not change.
func TestItemWithAChannelIsOneLetterAcrossReplays(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	var texts []string
	for run := range 3 {
		f, err := deadletter.OpenFile(path)
		require.NoError(t, err)
		env := positioned(1)
		env.Item = withChan{ID: 7, Done: make(chan struct{}), F: func() {}} // a replay decodes a new item
		env.ItemType = ""
		require.NoError(t, f.Write(context.Background(), env))
		s := f.Stats()
		require.NoError(t, f.Close())
		if run > 0 {
			assert.Equal(t, int64(1), s.Duplicates, "run %d wrote the letter again", run)
		}
	}
	for env, err := range deadletter.ReadAll(path) {
		require.NoError(t, err)
		texts = append(texts, env.ItemText)
	}
	require.Len(t, texts, 1)
	assert.Equal(t, "{ID:7 Done:(chan struct {}) F:(func())}", texts[0])
}

// ReadAll reads every letter written before it began, though the sink
// rotates the file it reads last while it reads the others.
func TestReadAllWhileTheSinkRotates(t *testing.T) {
	for _, rotateAt := range []int{1, 2} {
		path := filepath.Join(t.TempDir(), "dlq.jsonl")
		f, err := deadletter.OpenFile(path)
		require.NoError(t, err)
		write := func(i int) { require.NoError(t, f.Write(context.Background(), sampleEnvelope(i))) }
		write(1)
		require.NoError(t, f.Rotate()) // 1 in dlq.jsonl.000001
		write(2)                       // 2 in dlq.jsonl
		var got []int
		for env, err := range deadletter.ReadAll(path) {
			require.NoError(t, err)
			var o order
			require.NoError(t, json.Unmarshal(env.Item.(json.RawMessage), &o))
			got = append(got, o.ID)
			if o.ID == rotateAt {
				require.NoError(t, f.Rotate()) // 2 moves to dlq.jsonl.000002
				write(3)
				require.NoError(t, f.Rotate()) // 3 moves to dlq.jsonl.000003
				write(4)
			}
		}
		require.NoError(t, f.Close())
		assert.Equal(t, []int{1, 2}, got, "rotated after reading %d: want 1 and 2, each once, in order", rotateAt)
		// A read after the sink stopped has every letter, in order.
		got = got[:0]
		for env, err := range deadletter.ReadAll(path) {
			require.NoError(t, err)
			var o order
			require.NoError(t, json.Unmarshal(env.Item.(json.RawMessage), &o))
			got = append(got, o.ID)
		}
		assert.Equal(t, []int{1, 2, 3, 4}, got)
	}
}

type badA string
type badB string

// Maps whose keys read alike (NaNs, 1 and "1" in a map[any], channels)
// are described, and their bad parts named, the same way each time: the
// ties are ordered by the values (a second review's finding).
func TestMapKeysAlikeAreOneLetter(t *testing.T) {
	c1, c2 := make(chan int), make(chan int)
	items := map[string]func() any{
		"nan":   func() any { return map[float64]string{math.NaN(): "a", math.NaN(): "b"} },
		"mixed": func() any { return map[any]string{1: "a", "1": "b", int64(1): "c"} },
		"chan":  func() any { return map[chan int]string{c1: "a", c2: "b"} },
		"types": func() any { return map[float64]any{math.NaN(): badA("x\xff"), math.NaN(): badB("x\xff")} },
	}
	for name, mk := range items {
		path := filepath.Join(t.TempDir(), "dlq.jsonl")
		f, err := deadletter.OpenFile(path)
		require.NoError(t, err)
		texts, errs := map[string]bool{}, map[string]bool{}
		for range 40 {
			env := positioned(1)
			env.Item = mk()
			env.ItemType = ""
			require.NoError(t, f.Write(context.Background(), env))
			texts[deadletter.Describe(mk())] = true
			if _, err := deadletter.EncodeItem(mk(), nil); err != nil {
				errs[err.Error()] = true
			}
		}
		assert.Equal(t, int64(1), f.Stats().Writes, "%s: one letter; texts %v, errors %v", name, texts, errs)
		assert.Len(t, texts, 1, name)
		assert.LessOrEqual(t, len(errs), 1, name)
		require.NoError(t, f.Close())
	}
}
