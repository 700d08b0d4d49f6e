package main_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
)

// A confirmProxy forwards TCP to the broker. On the first connection
// whose client sends bytes holding marker (a publish), it holds
// back what the broker sends (the confirm) until release is called: then
// it either forwards what it held (cut false) or closes the connection
// (cut true), so that the client never sees that confirm. Other
// connections are forwarded as they are.
type confirmProxy struct {
	addr     string
	held     chan struct{} // closed once the marker went by
	released chan struct{}
	once     sync.Once
}

func newConfirmProxy(t *testing.T, brokerURL, marker string, cut bool) (*confirmProxy, string) {
	t.Helper()
	u, err := url.Parse(brokerURL)
	require.NoError(t, err)
	brokerAddr := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	p := &confirmProxy{addr: ln.Addr().String(), held: make(chan struct{}), released: make(chan struct{})}
	var marked atomic.Bool
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", brokerAddr)
			if err != nil {
				_ = c.Close()
				continue
			}
			var closeOnce sync.Once
			closeBoth := func() { closeOnce.Do(func() { _ = c.Close(); _ = s.Close() }) }
			t.Cleanup(closeBoth)
			var holding atomic.Bool
			go func() {
				defer closeBoth()
				buf := make([]byte, 64<<10)
				for {
					k, err := c.Read(buf)
					if k > 0 {
						if !holding.Load() && bytes.Contains(buf[:k], []byte(marker)) && marked.CompareAndSwap(false, true) {
							holding.Store(true)
							close(p.held)
						}
						if _, werr := s.Write(buf[:k]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() {
				defer closeBoth()
				buf := make([]byte, 64<<10)
				for {
					k, err := s.Read(buf)
					if k > 0 {
						if holding.Load() {
							<-p.released
							if cut {
								return
							}
						}
						if _, werr := c.Write(buf[:k]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	u.Host = p.addr
	return p, u.String()
}

func (p *confirmProxy) release() { p.once.Do(func() { close(p.released) }) }

// A redrive whose publish reached the broker, and whose connection was
// lost before the confirm came, publishes it again (the publisher's
// retry): the letter is on the queue twice, and the command says so, on
// its count line and naming the letter, instead of "1 of 1" alone.
func TestRedriveSaysALetterMayHaveBeenSentTwice(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	q := b.queue(t)
	dir := t.TempDir()
	f, err := deadletter.OpenFile(filepath.Join(dir, "l.jsonl"))
	require.NoError(t, err)
	require.NoError(t, f.Write(t.Context(), deadletter.Envelope{Item: item{ID: 1, SKU: "marker-7f3a9c"}, ErrText: "bad", OriginNode: "n", DecisionNode: "n", LastFailure: epoch}))
	require.NoError(t, f.Close())
	px, proxied := newConfirmProxy(t, b.url, "marker-7f3a9c", true)
	go func() {
		<-px.held
		for b.count(t, q) < 1 {
		}
		px.release()
	}()
	code, stdout, stderr := sluice(t, dir, "dlq", "redrive", "--amqp", proxied, "--queue", q, "--timeout", "20s", "l.jsonl")
	assert.Equal(t, 0, code, "stderr: %s", stderr)
	assert.Len(t, b.drain(t, q), 2, "on the queue twice")
	assert.Contains(t, stdout, "1 of 1 envelopes re-driven")
	assert.Contains(t, stdout, "; 1 may have been sent twice (reported above)")
	assert.Contains(t, stderr, "l.jsonl:1: may have been sent twice")
	again, stdout, _ := sluice(t, dir, "dlq", "redrive", "--amqp", proxied, "--queue", q, "l.jsonl")
	assert.Equal(t, 0, again)
	assert.Contains(t, stdout, "0 of 1 envelopes re-driven", "recorded in the ledger: not sent a third time")
}

// The same for requeue: the message is on --to twice, acked on --from,
// and the command names it.
func TestRequeueSaysAMessageMayBeOnTheTargetTwice(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	from, to := b.queue(t), b.queue(t)
	require.NoError(t, b.ch.PublishWithContext(t.Context(), "", from, false, false,
		amqp.Publishing{MessageId: "m-1", Body: []byte("marker-5e21d0")}))
	px, proxied := newConfirmProxy(t, b.url, "marker-5e21d0", true)
	go func() {
		<-px.held
		for b.count(t, to) < 1 {
		}
		px.release()
	}()
	code, stdout, stderr := sluice(t, t.TempDir(), "rabbitmq", "requeue", "--amqp", proxied, "--from", from, "--to", to, "--timeout", "20s")
	assert.Equal(t, 0, code, "stderr: %s", stderr)
	assert.Len(t, b.drain(t, to), 2)
	assert.Empty(t, b.drain(t, from))
	assert.Contains(t, stdout, fmt.Sprintf("1 messages moved from %q to %q; 1 may be on %q twice (message-id \"m-1\")", from, to, to))
}

// Ctrl-C while a requeue waits for a confirm does not cancel that
// publish: the broker has the message, so it is acked on --from and
// counted, and the command stops before the next one. It was nacked back
// to --from, though also on --to, and not counted.
func TestRequeueInterruptedWaitsForThePublishUnderWay(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	from, to := b.queue(t), b.queue(t)
	for i, body := range []string{"marker-9b7c11", "second"} {
		require.NoError(t, b.ch.PublishWithContext(t.Context(), "", from, false, false,
			amqp.Publishing{MessageId: fmt.Sprint(i), Body: []byte(body)}))
	}
	px, proxied := newConfirmProxy(t, b.url, "marker-9b7c11", false)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "rabbitmq", "requeue", "--amqp", proxied, "--from", from, "--to", to, "--timeout", "20s")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	select {
	case <-px.held:
	case <-ctx.Done():
		t.Fatal("the first publish never went by")
	}
	for b.count(t, to) < 1 {
	}
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	// While the confirm is held, the interrupted command must not give
	// the message back to --from (it did, cancelling the publish under
	// way, though the broker had it). A command that does so does it at
	// once; one that waits shows nothing to wait on, hence the bound.
	assert.Never(t, func() bool { return b.count(t, from) == 2 }, 500*time.Millisecond, 5*time.Millisecond,
		"the message went back to --from while the broker had it")
	px.release()
	err := cmd.Wait()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "exit status 1: %v", err)
	assert.Equal(t, 1, exit.ExitCode())
	assert.Equal(t, fmt.Sprintf("1 messages moved from %q to %q\n", from, to), stdout.String())
	assert.Contains(t, stderr.String(), "interrupted")
	assert.Len(t, b.drain(t, to), 1, "the first, once")
	assert.Len(t, b.drain(t, from), 1, "the second, not taken")
}

// A dead letter of rabbitmq.DeadLetterPublisher is requeued as its item,
// whose message ID is the item's, not the envelope's (which has none):
// the "may be on --to twice" line names the ID on --to. (It named the
// envelope's, empty.)
func TestRequeueTwiceNamesThePublishedMessageID(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	from, to := b.queue(t), b.queue(t)
	body, err := deadletter.MarshalEnvelope(deadletter.Envelope{
		Item:     rabbitmq.Message{MessageID: "item-1", Body: []byte("marker-a71c55")},
		ItemType: deadletter.TypeOf(rabbitmq.Message{}), ErrText: "bad", OriginNode: "n", DecisionNode: "n", LastFailure: epoch})
	require.NoError(t, err)
	require.NoError(t, b.ch.PublishWithContext(t.Context(), "", from, false, false,
		amqp.Publishing{Type: rabbitmq.EnvelopeType, ContentType: "application/json", Body: body}))
	px, proxied := newConfirmProxy(t, b.url, "marker-a71c55", true)
	go func() {
		<-px.held
		for b.count(t, to) < 1 {
		}
		px.release()
	}()
	code, stdout, stderr := sluice(t, t.TempDir(), "rabbitmq", "requeue", "--amqp", proxied, "--from", from, "--to", to, "--timeout", "20s")
	assert.Equal(t, 0, code, "stderr: %s", stderr)
	got := b.drain(t, to)
	require.Len(t, got, 2)
	assert.Equal(t, "item-1", got[0].MessageId, "what is on --to")
	assert.Contains(t, stdout, fmt.Sprintf("1 may be on %q twice (message-id \"item-1\")", to), "stdout: %s", stdout)
}
