package main_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/servicetest"
)

// broker connects to the RabbitMQ the tests use (or skips without one) and
// declares fresh queues named after the test, deleted at its end.
type broker struct {
	url string
	ch  *amqp.Channel
}

func newBroker(t *testing.T) *broker {
	t.Helper()
	url := servicetest.RabbitMQ(t)
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	ch, err := conn.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return &broker{url: url, ch: ch}
}

func (b *broker) queue(t *testing.T) string {
	t.Helper()
	var r [4]byte
	_, _ = rand.Read(r[:])
	name := "sluice-test.cli." + strings.ReplaceAll(t.Name(), "/", ".") + "." + hex.EncodeToString(r[:])
	_, err := b.ch.QueueDeclare(name, true, false, false, false, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = b.ch.QueueDelete(name, false, false, false) })
	return name
}

// drain takes every message of queue, acking it.
func (b *broker) drain(t *testing.T, queue string) []amqp.Delivery {
	t.Helper()
	var got []amqp.Delivery
	for {
		d, ok, err := b.ch.Get(queue, true)
		require.NoError(t, err)
		if !ok {
			return got
		}
		got = append(got, d)
	}
}

// Re-drive publishes each letter's item once: a second redrive of the same
// files sends nothing, a new letter is sent alone, an item never encoded
// is reported and not sent.
func TestRedriveToRabbitMQ(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue(t)
	dir := fixture(t)

	code, stdout, stderr := sluice(t, dir, "dlq", "redrive", "--amqp", b.url, "--queue", q, "--rotated", "rows.jsonl")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "9 of 9 envelopes re-driven to queue \""+q+"\"; 0 were already (ledger rows.jsonl.redriven)\n", stdout)
	msgs := b.drain(t, q)
	require.Len(t, msgs, 9)
	var ids []int
	for _, m := range msgs {
		var it item
		require.NoError(t, json.Unmarshal(m.Body, &it))
		ids = append(ids, it.ID)
		assert.Equal(t, "application/json", m.ContentType)
		assert.Equal(t, "github.com/sluicehq/sluice/cmd/sluice_test.item", m.Headers["x-sluice-item-type"])
	}
	assert.Equal(t, []int{0, 1, 2, 100, 101, 102, 103, 104, 105}, ids, "in file order, oldest file first")

	// Again: the ledger says every letter was sent.
	code, stdout, stderr = sluice(t, dir, "dlq", "redrive", "--amqp", b.url, "--queue", q, "--rotated", "rows.jsonl")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "0 of 9 envelopes re-driven to queue \""+q+"\"; 9 were already (ledger rows.jsonl.redriven)\n", stdout)
	assert.Empty(t, b.drain(t, q))

	// A new letter is sent alone.
	f, err := deadletter.OpenFile(filepath.Join(dir, "rows.jsonl"))
	require.NoError(t, err)
	require.NoError(t, f.Write(t.Context(), deadletter.Envelope{Item: item{ID: 999}, ErrText: "late", OriginNode: "enrich", CorrelationID: "order-999"}))
	require.NoError(t, f.Close())
	code, stdout, stderr = sluice(t, dir, "dlq", "redrive", "--amqp", b.url, "--queue", q, "--rotated", "rows.jsonl")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "1 of 10 envelopes re-driven")
	msgs = b.drain(t, q)
	require.Len(t, msgs, 1)
	assert.JSONEq(t, `{"id":999,"sku":""}`, string(msgs[0].Body))
	assert.Equal(t, "order-999", msgs[0].CorrelationId)

	// dlq.jsonl's line 6 holds an item that was never encoded.
	code, stdout, stderr = sluice(t, dir, "dlq", "redrive", "--amqp", b.url, "--queue", q, "--node", "price", "dlq.jsonl")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "dlq.jsonl:6: not re-driven: the item was not encoded")
	assert.Contains(t, stdout, "2 of 3 envelopes re-driven")
	assert.Len(t, b.drain(t, q), 2)
}

// A letter no queue takes fails the redrive, and is not in the ledger, so
// the next redrive sends it; a redrive that sent nothing leaves no ledger
// file behind.
func TestRedriveToAMissingQueue(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dir := fixture(t)
	code, stdout, stderr := sluice(t, dir, "dlq", "redrive", "--amqp", b.url, "--queue", "sluice-test.cli.no-such-queue", "rows.jsonl")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "rows.jsonl:1")
	assert.Contains(t, stdout, "0 of 6 envelopes re-driven")
	assert.NoFileExists(t, filepath.Join(dir, "rows.jsonl.redriven"), "no letter was sent: no ledger")
}

// Requeue moves a dead-letter queue's messages back to the work queue,
// body and properties intact; --limit bounds it.
func TestRequeue(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dead, work := b.queue(t), b.queue(t)
	for i := range 5 {
		require.NoError(t, b.ch.PublishWithContext(t.Context(), "", dead, false, false, amqp.Publishing{
			Body: []byte(strconv.Itoa(i)), ContentType: "text/plain", CorrelationId: "c" + strconv.Itoa(i),
			Headers: amqp.Table{"x-app": "kept"}, Timestamp: time.Unix(1700000000, 0),
		}))
	}
	code, stdout, stderr := sluice(t, t.TempDir(), "rabbitmq", "requeue", "--amqp", b.url, "--from", dead, "--to", work, "--limit", "2")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "2 messages moved from \""+dead+"\" to \""+work+"\"\n", stdout)
	code, stdout, stderr = sluice(t, t.TempDir(), "rabbitmq", "requeue", "--amqp", b.url, "--from", dead, "--to", work)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "3 messages moved from \""+dead+"\" to \""+work+"\"\n", stdout)

	assert.Empty(t, b.drain(t, dead))
	msgs := b.drain(t, work)
	require.Len(t, msgs, 5)
	for i, m := range msgs {
		assert.Equal(t, strconv.Itoa(i), string(m.Body))
		assert.Equal(t, "c"+strconv.Itoa(i), m.CorrelationId)
		assert.Equal(t, "text/plain", m.ContentType)
		assert.Equal(t, "kept", m.Headers["x-app"])
		assert.Equal(t, int64(1700000000), m.Timestamp.Unix())
		assert.Equal(t, uint8(0), m.DeliveryMode, "properties kept as they were")
	}

	// A missing --to moves nothing and leaves the messages where they are.
	require.NoError(t, b.ch.PublishWithContext(t.Context(), "", dead, false, false, amqp.Publishing{Body: []byte("x")}))
	code, _, stderr = sluice(t, t.TempDir(), "rabbitmq", "requeue", "--amqp", b.url, "--from", dead, "--to", "sluice-test.cli.no-such-queue")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "--to")
	assert.Len(t, b.drain(t, dead), 1)
}

// A dead-lettered rabbitmq.Message is re-driven as the message it was (its
// body and properties, without its earlier life's headers), not as the JSON
// of the Message struct; a []byte as its bytes.
func TestRedriveGivesBackTheMessage(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue(t)
	dir := t.TempDir()
	f, err := deadletter.OpenFile(filepath.Join(dir, "d.jsonl"))
	require.NoError(t, err)
	require.NoError(t, f.Write(t.Context(), deadletter.Envelope{
		Item: rabbitmq.Message{Body: []byte(`{"order":42}`), ContentType: "application/json", MessageID: "m-42",
			Headers: amqp.Table{"x-app": "kept", "x-sluice-attempts": int64(3), "x-death": []any{}}},
		ErrText: "boom", OriginNode: "handle", DecisionNode: "handle",
	}))
	require.NoError(t, f.Write(t.Context(), deadletter.Envelope{Item: []byte("raw bytes"), ErrText: "boom"}))
	require.NoError(t, f.Close())
	code, _, stderr := sluice(t, dir, "dlq", "redrive", "--amqp", b.url, "--queue", q, "d.jsonl")
	require.Equal(t, 0, code, stderr)
	msgs := b.drain(t, q)
	require.Len(t, msgs, 2)
	assert.Equal(t, `{"order":42}`, string(msgs[0].Body))
	assert.Equal(t, "m-42", msgs[0].MessageId)
	assert.Equal(t, "kept", msgs[0].Headers["x-app"])
	assert.NotContains(t, msgs[0].Headers, "x-sluice-attempts")
	assert.NotContains(t, msgs[0].Headers, "x-death")
	assert.Equal(t, "raw bytes", string(msgs[1].Body))
}

// Requeue gives back the item of a dead letter that DeadLetterPublisher
// wrote, not the envelope.
func TestRequeueUnwrapsDeadLetters(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dead, work := b.queue(t), b.queue(t)
	require.NoError(t, b.ch.QueueBind(dead, dead, "amq.direct", false, nil))
	pub, err := rabbitmq.NewDeadLetterPublisher(rabbitmq.DeadLetterConfig{URL: b.url, Exchange: "amq.direct", RoutingKey: dead})
	require.NoError(t, err)
	require.NoError(t, pub.Write(t.Context(), deadletter.Envelope{Item: map[string]int{"order": 42}, ErrText: "boom", CorrelationID: "o-42"}))
	require.NoError(t, pub.Close())
	code, _, stderr := sluice(t, t.TempDir(), "rabbitmq", "requeue", "--amqp", b.url, "--from", dead, "--to", work)
	require.Equal(t, 0, code, stderr)
	msgs := b.drain(t, work)
	require.Len(t, msgs, 1)
	assert.JSONEq(t, `{"order":42}`, string(msgs[0].Body))
	assert.Equal(t, "o-42", msgs[0].CorrelationId)
	assert.NotEqual(t, rabbitmq.EnvelopeType, msgs[0].Type)
}

// The ledger is per target, and a torn last line does not swallow the next
// letter's record.
func TestRedriveLedger(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q1, q2 := b.queue(t), b.queue(t)
	dir := fixture(t)
	run := func(q string) string {
		t.Helper()
		code, stdout, stderr := sluice(t, dir, "dlq", "redrive", "--amqp", b.url, "--queue", q, "rows.jsonl")
		require.Equal(t, 0, code, stderr)
		return stdout
	}
	assert.Contains(t, run(q1), "6 of 6 envelopes re-driven")
	assert.Contains(t, run(q2), "6 of 6 envelopes re-driven", "another target gets them too")
	assert.Contains(t, run(q1), "0 of 6 envelopes re-driven")
	// A crash tore the ledger's last line: that letter is sent again, once.
	ledger := filepath.Join(dir, "rows.jsonl.redriven")
	data, err := os.ReadFile(ledger)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(ledger, data[:len(data)-20], 0o600))
	assert.Contains(t, run(q2), "1 of 6 envelopes re-driven")
	assert.Contains(t, run(q2), "0 of 6 envelopes re-driven", "the torn line was ended, the next one recorded whole")
	assert.Len(t, b.drain(t, q1), 6)
	assert.Len(t, b.drain(t, q2), 7)

	// The ledger knows the broker: the same queue on another broker or
	// vhost still gets the letters; other credentials are the same broker.
	dry := func(url string) string {
		t.Helper()
		code, stdout, stderr := sluice(t, dir, "dlq", "redrive", "--amqp", url, "--queue", q1, "--dry-run", "rows.jsonl")
		require.Equal(t, 0, code, stderr)
		return stdout
	}
	assert.Contains(t, dry("amqp://guest:guest@other-broker.example:5672/"), "6 of 6 envelopes would be re-driven")
	u, err := url.Parse(b.url)
	require.NoError(t, err)
	u.Path = "/other-vhost"
	assert.Contains(t, dry(u.String()), "6 of 6 envelopes would be re-driven")
	u.Path, u.User = "/", url.UserPassword("someone", "else")
	assert.Contains(t, dry(u.String()), "0 of 6 envelopes would be re-driven")
}

// A message no publish can move (a dead letter whose item was never
// encoded) stays on --from, where it was, while the messages after it are
// moved: requeue used to stop at it and put it back at the head, so every
// later requeue stopped at it too and moved nothing.
func TestRequeueMovesPastAMessageItCannotPublish(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dead, work := b.queue(t), b.queue(t)
	unencoded, err := deadletter.MarshalEnvelope(deadletter.Envelope{ItemError: "json: unsupported type: chan int", ErrText: "boom"})
	require.NoError(t, err)
	publish := func(p amqp.Publishing) {
		require.NoError(t, b.ch.PublishWithContext(t.Context(), "", dead, false, false, p))
	}
	publish(amqp.Publishing{Body: []byte("0")})
	publish(amqp.Publishing{Type: rabbitmq.EnvelopeType, MessageId: "unencoded", Body: unencoded})
	publish(amqp.Publishing{Type: rabbitmq.EnvelopeType, MessageId: "torn", Body: []byte(`{"err":`)})
	publish(amqp.Publishing{Body: []byte("1")})
	publish(amqp.Publishing{Body: []byte("2")})

	for run := range 2 {
		code, stdout, stderr := sluice(t, t.TempDir(), "rabbitmq", "requeue", "--amqp", b.url, "--from", dead, "--to", work)
		assert.Equal(t, 1, code, "run %d", run)
		want := []string{"3", "0"}[run]
		assert.Equal(t, want+" messages moved from \""+dead+"\" to \""+work+"\"\n", stdout, "run %d", run)
		assert.Contains(t, stderr, "2 messages left on \""+dead+"\"", "run %d", run)
		assert.Contains(t, stderr, `message-id "unencoded"`)
		assert.Contains(t, stderr, "the item was not encoded")
		assert.Contains(t, stderr, `message-id "torn"`)
	}
	moved := b.drain(t, work)
	require.Len(t, moved, 3)
	for i, m := range moved {
		assert.Equal(t, strconv.Itoa(i), string(m.Body))
	}
	left := b.drain(t, dead)
	require.Len(t, left, 2, "the messages no publish can move stay where they were")
	assert.Equal(t, "unencoded", left[0].MessageId)
	assert.Equal(t, "torn", left[1].MessageId)
}

// --limit counts the messages requeue takes, those it leaves as well as
// those it moves, so a queue of unmovable messages cannot make it loop;
// the error names the first ten it left.
func TestRequeueLimitCountsTheMessagesLeft(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	dead, work := b.queue(t), b.queue(t)
	for i := range 12 {
		require.NoError(t, b.ch.PublishWithContext(t.Context(), "", dead, false, false, amqp.Publishing{
			Type: rabbitmq.EnvelopeType, MessageId: "torn" + strconv.Itoa(i), Body: []byte("{")}))
	}
	require.NoError(t, b.ch.PublishWithContext(t.Context(), "", dead, false, false, amqp.Publishing{Body: []byte("ok")}))
	code, stdout, stderr := sluice(t, t.TempDir(), "rabbitmq", "requeue", "--amqp", b.url, "--from", dead, "--to", work, "--limit", "11")
	assert.Equal(t, 1, code)
	assert.Equal(t, "0 messages moved from \""+dead+"\" to \""+work+"\"\n", stdout)
	assert.Contains(t, stderr, "11 messages left")
	assert.Contains(t, stderr, `message 10 taken (message-id "torn9")`)
	assert.NotContains(t, stderr, "torn10")
	assert.Contains(t, stderr, "and more")
	assert.Empty(t, b.drain(t, work))
	left := b.drain(t, dead)
	require.Len(t, left, 13)
	assert.Equal(t, "torn0", left[0].MessageId, "the messages left are back where they were")
	assert.Equal(t, "ok", string(left[12].Body))
}
