package deadletter_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
)

type withUnexported struct {
	ID     int
	secret string
}

type withDash struct {
	ID   int
	Memo string `json:"-"`
}

type withEmbedded struct {
	withUnexported
	Note string
}

// handled is an item as a broker source gives it: its data, and a handle
// on its delivery that is no part of it.
type handled struct {
	ID       int
	delivery *withUnexported
	done     func()
	Conn     chan int `json:"-"`
}

type stamped struct {
	ID int
	At time.Time // marshals itself, unexported fields and all
}

// redriveOne writes item to a new dead-letter file through the default
// encoder, then re-drives the file as a T: it returns what the re-drive
// emitted, its error, and the envelope as the file holds it.
func redriveOne[T any](t *testing.T, item T) ([]T, deadletter.Envelope, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	f, err := deadletter.OpenFile(path)
	require.NoError(t, err)
	require.NoError(t, f.Write(context.Background(), deadletter.Envelope{Item: item, ErrText: "boom", Pipeline: "p", OriginNode: "n"}))
	require.NoError(t, f.Close())
	var envs []deadletter.Envelope
	for env, err := range deadletter.ReadFile(path) {
		require.NoError(t, err)
		envs = append(envs, env)
	}
	require.Len(t, envs, 1, "the envelope is written, whatever its item")
	var out collector[T]
	err = deadletter.Source[T](path).Run(context.Background(), &out)
	return out.items, envs[0], err
}

// An item that JSON would not give back as it is is never re-driven as
// another item: the default encoder refuses it, the envelope keeps it as
// text with the reason, and the re-drive stops at its line with
// ErrUndecodableItem.
func TestLossyItemIsNotRedrivenAsAnother(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, items []any, err error, env deadletter.Envelope, reason string) {
		t.Helper()
		assert.Empty(t, items, "nothing re-driven")
		var le *deadletter.LineError
		require.ErrorAs(t, err, &le)
		assert.ErrorIs(t, le.Kind, deadletter.ErrUndecodableItem)
		assert.Contains(t, env.ItemError, "JSON would not give the item back as it is")
		assert.Contains(t, env.ItemError, reason)
		assert.NotEmpty(t, env.ItemText, "a person can still see the item")
	}
	t.Run("a string not UTF-8", func(t *testing.T) {
		t.Parallel()
		items, env, err := redriveOne(t, "id-\xff\xfe-42")
		check(t, toAny(items), err, env, "a string is not valid UTF-8")
		assert.Contains(t, env.ItemText, `\xff\xfe`, "the bytes are kept in the text")
	})
	t.Run("strings in a slice, a map's value and key", func(t *testing.T) {
		t.Parallel()
		items, env, err := redriveOne(t, []string{"ok", "bad\xff"})
		check(t, toAny(items), err, env, "not valid UTF-8")
		m, env, err := redriveOne(t, map[string]string{"k": "bad\xff"})
		check(t, toAny(m), err, env, "not valid UTF-8")
		k, env, err := redriveOne(t, map[string]int{"bad\xff": 1})
		check(t, toAny(k), err, env, "a key of map[string]int is not valid UTF-8")
		a, env, err := redriveOne(t, [2]string{"ok", "bad\xff"})
		check(t, toAny(a), err, env, "not valid UTF-8")
	})
}

// What JSON gives back as it is re-drives as it was: hidden fields that
// are empty, a type that marshals itself, bytes (base64), valid UTF-8.
// What encoding/json leaves out by its rules (an unexported field, one
// tagged json:"-") is not the item's JSON, and comes back empty, as
// documented: a handle, a cache.
func TestItemsJSONKeepRedriveAsTheyWere(t *testing.T) {
	t.Parallel()
	hid, env, err := redriveOne(t, withUnexported{ID: 7, secret: "cache"})
	require.NoError(t, err)
	assert.Empty(t, env.ItemError)
	assert.Equal(t, []withUnexported{{ID: 7}}, hid)
	dash, _, err := redriveOne(t, withDash{ID: 7, Memo: "kept apart"})
	require.NoError(t, err)
	assert.Equal(t, []withDash{{ID: 7}}, dash)
	emb, _, err := redriveOne(t, &withEmbedded{withUnexported: withUnexported{ID: 1, secret: "s"}, Note: "n"})
	require.NoError(t, err)
	assert.Equal(t, []*withEmbedded{{withUnexported: withUnexported{ID: 1}, Note: "n"}}, emb)
	bad, env, err := redriveOne(t, &withEmbedded{withUnexported: withUnexported{ID: 1}, Note: "n\xff"})
	assert.Empty(t, bad)
	require.Error(t, err, "a promoted field's string is checked too")
	assert.Contains(t, env.ItemError, "not valid UTF-8")
	u, _, err := redriveOne(t, withUnexported{ID: 7})
	require.NoError(t, err)
	assert.Equal(t, []withUnexported{{ID: 7}}, u)
	d, _, err := redriveOne(t, withDash{ID: 7})
	require.NoError(t, err)
	assert.Equal(t, []withDash{{ID: 7}}, d)
	h, _, err := redriveOne(t, handled{ID: 3, delivery: &withUnexported{secret: "x"}, done: func() {}, Conn: make(chan int)})
	require.NoError(t, err, "a handle is not the item's data")
	require.Len(t, h, 1)
	assert.Equal(t, 3, h[0].ID)
	at := time.Date(2026, 12, 4, 12, 0, 0, 1, time.UTC)
	s, _, err := redriveOne(t, stamped{ID: 1, At: at})
	require.NoError(t, err)
	require.Len(t, s, 1)
	assert.True(t, s[0].At.Equal(at))
	b, _, err := redriveOne(t, []byte("\xff\x00bytes"))
	require.NoError(t, err)
	assert.Equal(t, [][]byte{[]byte("\xff\x00bytes")}, b)
	str, _, err := redriveOne(t, "ünïcödé ✓")
	require.NoError(t, err)
	assert.Equal(t, []string{"ünïcödé ✓"}, str)
	raw, _, err := redriveOne(t, json.RawMessage(`{"a":1}`))
	require.NoError(t, err)
	assert.Equal(t, []json.RawMessage{json.RawMessage(`{"a":1}`)}, raw)
}

// An encoder of the program's own is trusted with what it keeps: the
// check is the default JSON's.
func TestOwnEncoderIsNotCheckedForLoss(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	f, err := deadletter.OpenFile(path, deadletter.WithEncoder(json.Marshal))
	require.NoError(t, err)
	require.NoError(t, f.Write(context.Background(), deadletter.Envelope{Item: withUnexported{ID: 7, secret: "s"}, ErrText: "boom"}))
	require.NoError(t, f.Close())
	for env, err := range deadletter.ReadFile(path) {
		require.NoError(t, err)
		assert.Empty(t, env.ItemError)
		assert.JSONEq(t, `{"ID":7}`, string(env.Item.(json.RawMessage)))
	}
}

// A broker's dead-letter message is checked as the file's line is.
func TestMarshalEnvelopeRefusesALossyItem(t *testing.T) {
	t.Parallel()
	body, err := deadletter.MarshalEnvelope(deadletter.Envelope{Item: withDash{ID: 1, Memo: "m"}, ErrText: "boom"})
	require.NoError(t, err)
	env, err := deadletter.UnmarshalEnvelope(body)
	require.NoError(t, err)
	assert.Empty(t, env.ItemError, "a field JSON leaves out is not a loss")
	body, err = deadletter.MarshalEnvelope(deadletter.Envelope{Item: map[string]string{"k": "v\xff"}, ErrText: "boom"})
	require.NoError(t, err)
	env, err = deadletter.UnmarshalEnvelope(body)
	require.NoError(t, err)
	assert.ErrorContains(t, errorsNew(env.ItemError), "not valid UTF-8")
	assert.JSONEq(t, "null", string(env.Item.(json.RawMessage)))
}

func toAny[T any](items []T) []any {
	out := make([]any, len(items))
	for i, v := range items {
		out[i] = v
	}
	return out
}

type textError string

func (e textError) Error() string { return string(e) }

func errorsNew(s string) error { return textError(s) }
