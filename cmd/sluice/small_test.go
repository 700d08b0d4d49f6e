package main_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
)

// A timeout that is not positive is a usage error (exit 2), found before
// any broker is dialled.
func TestCLITimeoutNotPositiveIsAUsageError(t *testing.T) {
	t.Parallel()
	dir := fixture(t)
	for _, d := range []string{"-1s", "0s"} {
		code, _, stderr := sluice(t, dir, "dlq", "redrive", "--amqp", "amqp://guest:guest@127.0.0.1:1/", "--queue", "q", "--timeout", d, "rows.jsonl")
		assert.Equal(t, 2, code, stderr)
		assert.Contains(t, stderr, "dlq redrive: --timeout "+d+": must be positive")
		code, _, stderr = sluice(t, dir, "rabbitmq", "requeue", "--amqp", "amqp://guest:guest@127.0.0.1:1/", "--from", "a", "--to", "b", "--timeout", d)
		assert.Equal(t, 2, code, stderr)
		assert.Contains(t, stderr, "rabbitmq requeue: --timeout "+d+": must be positive")
	}
}

// dlq show prints a []byte item that is valid UTF-8 as text, and says so;
// a binary one stays base64, and says so too.
func TestCLIShowBytesItem(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f, err := deadletter.OpenFile(filepath.Join(dir, "bytes.jsonl"))
	require.NoError(t, err)
	require.NoError(t, f.Write(t.Context(), deadletter.Envelope{Item: []byte(`{"id":7,"name":"Zoë"}`), ErrText: "bad"}))
	require.NoError(t, f.Write(t.Context(), deadletter.Envelope{Item: []byte{0xff, 0x00, 0x01}, ErrText: "bad"}))
	require.NoError(t, f.Write(t.Context(), deadletter.Envelope{Item: []byte{}, ErrText: "bad"}))
	require.NoError(t, f.Close())

	code, stdout, stderr := sluice(t, dir, "dlq", "show", "bytes.jsonl", "1")
	require.Equal(t, 0, code, stderr)
	var shown map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &shown), stdout)
	assert.Equal(t, `{"id":7,"name":"Zoë"}`, shown["item"])
	assert.Equal(t, "text", shown["item_encoding"])

	code, stdout, stderr = sluice(t, dir, "dlq", "show", "bytes.jsonl", "2")
	require.Equal(t, 0, code, stderr)
	shown = nil
	require.NoError(t, json.Unmarshal([]byte(stdout), &shown), stdout)
	assert.Equal(t, "/wAB", shown["item"])
	assert.Equal(t, "base64", shown["item_encoding"])

	code, stdout, stderr = sluice(t, dir, "dlq", "show", "bytes.jsonl", "3")
	require.Equal(t, 0, code, stderr)
	shown = nil
	require.NoError(t, json.Unmarshal([]byte(stdout), &shown), stdout)
	assert.Equal(t, "", shown["item"])
	assert.Equal(t, "text", shown["item_encoding"])
	assert.True(t, strings.HasSuffix(stdout, "}\n"))
}

// A rabbitmq.Message's body is shown as text too.
func TestCLIShowMessageBody(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f, err := deadletter.OpenFile(filepath.Join(dir, "msg.jsonl"))
	require.NoError(t, err)
	require.NoError(t, f.Write(t.Context(), deadletter.Envelope{Item: rabbitmq.Message{Body: []byte("héllo"), RoutingKey: "orders"}, ErrText: "bad"}))
	require.NoError(t, f.Close())
	code, stdout, stderr := sluice(t, dir, "dlq", "show", "msg.jsonl", "1")
	require.Equal(t, 0, code, stderr)
	var shown struct {
		Item map[string]any `json:"item"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &shown), stdout)
	assert.Equal(t, "héllo", shown.Item["body"])
	assert.Equal(t, "text", shown.Item["body_encoding"])
	assert.Equal(t, "orders", shown.Item["routing_key"])
	assert.Less(t, strings.Index(stdout, `"body"`), strings.Index(stdout, `"routing_key"`), "fields keep their order")
}
