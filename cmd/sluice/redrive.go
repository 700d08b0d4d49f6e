package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
)

// A letter is one envelope to re-drive, with the key the ledger knows it
// by: the SHA-256 of its line, which names one dead letter (its item, its
// error and its times) wherever the line is copied to.
type letter struct {
	r   deadletter.Record
	key string
}

func letterKey(raw []byte) string {
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// redrive publishes the items of dead letters to RabbitMQ, each once: the
// ledger records what was re-driven, so that a second redrive of the same
// files sends only what is new.
func redrive(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("redrive")
	var in input
	addInputFlags(fs, &in)
	url := fs.String("amqp", "", "the RabbitMQ `URL` to publish to, as amqp://user:pass@host:5672/vhost")
	queue := fs.String("queue", "", "publish to the queue `Q` (through the default exchange)")
	exchange := fs.String("exchange", "", "publish to the exchange `X` instead")
	key := fs.String("routing-key", "", "the routing `KEY` with --exchange")
	node := fs.String("node", "", "re-drive only envelopes whose origin or decision node is `X`")
	ledgerPath := fs.String("ledger", "", "the ledger `FILE` of what was re-driven (default: the first FILE + .redriven)")
	dryRun := fs.Bool("dry-run", false, "list what would be re-driven; publish nothing, write no ledger")
	timeout := fs.Duration("timeout", 30*time.Second, "give up on a publish not confirmed within `D`")
	positional, code, ok := parse(fs, args, stdout, stderr)
	switch {
	case !ok:
		return code
	case len(positional) == 0:
		return wrongArgs(stderr, "redrive", "FILE...", positional)
	case *url == "":
		return usageError(stderr, "dlq redrive: --amqp URL is required (--dry-run reads the ledger for that broker)")
	case (*queue == "") == (*exchange == ""):
		return usageError(stderr, "dlq redrive: give one of --queue Q and --exchange X")
	case *queue != "" && *key != "":
		return usageError(stderr, "dlq redrive: --routing-key goes with --exchange; --queue is the routing key")
	case *timeout <= 0:
		return usageError(stderr, fmt.Sprintf("dlq redrive: --timeout %s: must be positive", *timeout))
	}
	in.files = positional
	if *ledgerPath == "" {
		*ledgerPath = positional[0] + ".redriven"
	}
	target := fmt.Sprintf("queue %q", *queue)
	if *exchange != "" {
		target = fmt.Sprintf("exchange %q with routing key %q", *exchange, *key)
	}

	// The ledger knows a letter by the broker and the target it went to:
	// the same queue on another broker or vhost still gets it.
	where, err := brokerOf(*url)
	if err != nil {
		return usageError(stderr, "dlq redrive: --amqp: "+err.Error())
	}
	where += " " + target
	done, err := readLedger(*ledgerPath, where)
	if err != nil {
		dataError(stderr, err)
		return exitData
	}
	var todo []letter
	total, already, unencoded := 0, 0, 0
	code, _, read := in.each(stderr, func(r deadletter.Record) {
		if *node != "" && r.OriginNode != *node && r.DecisionNode != *node {
			return
		}
		total++
		k := letterKey(r.Raw)
		switch {
		case done[k]:
			already++
		case r.ItemError != "":
			// Nothing to send: the item was never encoded.
			unencoded++
			dataError(stderr, fmt.Errorf("%s:%d: not re-driven: the item was not encoded when it was dead-lettered: %s", r.Path, r.Line, r.ItemError))
		default:
			done[k] = true // a line copied twice is sent once
			todo = append(todo, letter{r, k})
		}
	})
	if !read {
		return code
	}
	if unencoded > 0 {
		code = exitData
	}
	if *dryRun {
		for _, l := range todo {
			fmt.Fprintf(stdout, "would re-drive %s:%d (%s) to %s\n", l.r.Path, l.r.Line, orDash(l.r.OriginNode), target)
		}
		fmt.Fprintf(stdout, "%d of %d envelopes would be re-driven to %s; %d were already (ledger %s)\n", len(todo), total, target, already, *ledgerPath)
		return code
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	sent, err := publishLetters(ctx, todo, *url, *exchange, cmpOr(*queue, *key), *timeout, *ledgerPath, where)
	fmt.Fprintf(stdout, "%d of %d envelopes re-driven to %s; %d were already (ledger %s)\n", sent, total, target, already, *ledgerPath)
	if err != nil {
		dataError(stderr, err)
		return exitData
	}
	return code
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// publishLetters publishes each letter's item with publisher confirms and
// records it in the ledger once the broker confirmed it. A crash between
// the confirm and the ledger's fsync sends that letter again next time:
// re-drive is at-least-once, as the handlers of re-driven items must
// allow (docs/dead-letters.md).
func publishLetters(ctx context.Context, todo []letter, url, exchange, key string, timeout time.Duration, ledgerPath, target string) (sent int, err error) {
	if len(todo) == 0 {
		return 0, nil
	}
	pub, err := rabbitmq.NewPublisher(rabbitmq.PublisherConfig[letter]{
		URL: url, Exchange: exchange, RoutingKey: key,
		// An item no queue takes is an error, not a silent drop.
		Mandatory: true,
		Confirms:  rabbitmq.Confirms{Enabled: true, WaitFor: true, Timeout: timeout},
		PubRetry:  rabbitmq.PubRetry{Enabled: true},
		Publishing: func(l letter) (amqp.Publishing, error) {
			// The item as it was: a Message's own body, a []byte's bytes,
			// else its JSON.
			pub, err := rabbitmq.Republishing(l.r.Envelope)
			if err != nil {
				return pub, err
			}
			pub.MessageId = cmpOr(pub.MessageId, l.key)
			if pub.Headers == nil {
				pub.Headers = amqp.Table{}
			}
			pub.Headers["x-sluice-redrive-of"] = fmt.Sprintf("%s:%d", l.r.Path, l.r.Line)
			pub.Headers["x-sluice-redrive-node"] = l.r.DecisionNode
			pub.Headers["x-sluice-item-type"] = l.r.ItemType
			return pub, nil
		},
	})
	if err != nil {
		return 0, err
	}
	if err := pub.Open(ctx); err != nil {
		return 0, errors.Join(err, pub.Close(ctx))
	}
	defer func() { err = errors.Join(err, pub.Close(ctx)) }()
	ledger, created, err := openLedger(ledgerPath)
	if err != nil {
		return 0, err
	}
	defer func() {
		err = errors.Join(err, ledger.Close())
		if created && sent == 0 {
			// Opened first so that a ledger that cannot be written stops
			// the redrive before it sends anything; a redrive that sent
			// nothing leaves no empty ledger behind.
			err = errors.Join(err, os.Remove(ledgerPath))
		}
	}()
	for _, l := range todo {
		if err := pub.Write(ctx, l); err != nil {
			return sent, fmt.Errorf("%s:%d: %w", l.r.Path, l.r.Line, err)
		}
		if _, err := fmt.Fprintf(ledger, "%s %s %s:%d\n", l.key, ledgerTarget(target), l.r.Path, l.r.Line); err != nil {
			return sent, fmt.Errorf("ledger: %w", err)
		}
		if err := ledger.Sync(); err != nil {
			return sent, fmt.Errorf("ledger: %w", err)
		}
		sent++
	}
	return sent, nil
}

// The ledger: one line per letter re-driven, once its publish was
// confirmed: the letter's key, where it went (the broker's host and vhost,
// and the queue or exchange; spaces as %20), and where the letter was, for
// people. A letter re-driven to one place is not re-driven there again;
// another place still gets it.

// brokerOf names the broker of an AMQP URL for the ledger: host, port and
// vhost, without the credentials.
func brokerOf(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return "", fmt.Errorf("%q is not an amqp:// or amqps:// URL", u.Redacted())
	}
	vhost := strings.TrimPrefix(u.Path, "/")
	if vhost == "" {
		vhost = "/"
	}
	return u.Scheme + "://" + u.Host + " vhost " + vhost, nil
}

func ledgerTarget(target string) string { return strings.ReplaceAll(target, " ", "%20") }

// readLedger returns the keys that the ledger at path holds for target; a
// missing ledger is empty. A torn last line, left by a crash, is ignored:
// its letter was not recorded.
func readLedger(path, target string) (map[string]bool, error) {
	done := map[string]bool{}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return done, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	defer f.Close()
	want := ledgerTarget(target)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && len(fields[0]) == sha256.Size*2 && fields[1] == want {
			done[fields[0]] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("ledger %s: %w", path, err)
	}
	return done, nil
}

// openLedger opens the ledger for appending, first ending a torn last line
// (a crash in the middle of a write), so that the next line starts whole.
// created says the file did not exist before.
func openLedger(path string) (f *os.File, created bool, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	if errors.Is(err, os.ErrNotExist) {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
		created = err == nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("ledger: %w", err)
	}
	info, err := f.Stat()
	if err == nil && info.Size() > 0 {
		last := make([]byte, 1)
		if _, err = f.ReadAt(last, info.Size()-1); err == nil && last[0] != '\n' {
			_, err = f.Write([]byte{'\n'})
		}
	}
	if err != nil {
		return nil, false, errors.Join(fmt.Errorf("ledger: %w", err), f.Close())
	}
	return f, created, nil
}
