package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicehq/sluice/connector/rabbitmq"
)

func runRabbitMQ(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return usageError(stderr, "rabbitmq: no subcommand (requeue)")
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "requeue":
		return requeue(args[1:], stdout, stderr)
	default:
		return usageError(stderr, fmt.Sprintf("rabbitmq: unknown subcommand %q", args[0]))
	}
}

// requeue moves messages from one queue (a dead-letter queue) back to
// another (the work queue): each is published with confirms, then acked
// on the queue it came from, so a crash in between leaves it in both
// queues, never in neither.
func requeue(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("requeue")
	fs.Init("sluice rabbitmq requeue", flag.ContinueOnError)
	url := fs.String("amqp", "", "the RabbitMQ `URL`, as amqp://user:pass@host:5672/vhost")
	from := fs.String("from", "", "take messages from the queue `Q` (a dead-letter queue)")
	to := fs.String("to", "", "put them on the queue `Q` (through the default exchange)")
	limit := fs.Int("limit", 0, "take at most `N` messages; 0: those in the queue when it starts")
	timeout := fs.Duration("timeout", 30*time.Second, "give up on a publish not confirmed within `D`")
	positional, code, ok := parse(fs, args, stdout, stderr)
	switch {
	case !ok:
		return code
	case len(positional) != 0:
		return usageError(stderr, fmt.Sprintf("rabbitmq requeue: unexpected arguments %q", positional))
	case *url == "" || *from == "" || *to == "":
		return usageError(stderr, "rabbitmq requeue: --amqp, --from and --to are required")
	case *from == *to:
		return usageError(stderr, "rabbitmq requeue: --from and --to name the same queue")
	case *limit < 0:
		return usageError(stderr, fmt.Sprintf("rabbitmq requeue: --limit %d: must not be negative", *limit))
	case *timeout <= 0:
		return usageError(stderr, fmt.Sprintf("rabbitmq requeue: --timeout %s: must be positive", *timeout))
	}
	// Ctrl-C stops between two messages; a second one ends the command
	// at once.
	interrupted, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	context.AfterFunc(interrupted, stop)
	var twice []string
	n := 0
	moved, err := move(interrupted, *url, *from, *to, *limit, *timeout, func(name string) {
		if n++; n <= maxReasons {
			twice = append(twice, name)
		}
	})
	line := fmt.Sprintf("%d messages moved from %q to %q", moved, *from, *to)
	if n > 0 {
		if n > maxReasons {
			twice = append(twice, "and more")
		}
		line += fmt.Sprintf("; %d may be on %q twice (%s): the connection was lost before the broker confirmed the first publish, and a second was confirmed",
			n, *to, strings.Join(twice, ", "))
	}
	fmt.Fprintln(stdout, line)
	if err != nil {
		dataError(stderr, err)
		return exitData
	}
	return exitOK
}

// move moves up to limit messages (0: as many as from holds now). It stops
// before the next message once interrupted ends; the publish under way is
// not cancelled by it, only bounded by the confirm timeout, so that a
// message the broker took is acked and counted. A message whose first
// publish lost its connection before its confirm came, and whose retry
// was confirmed, is moved and passed to resent: it may be on to twice.
func move(interrupted context.Context, url, from, to string, limit int, timeout time.Duration, resent func(messageID string)) (moved int, err error) {
	ctx := context.WithoutCancel(interrupted)
	conn, err := amqp.DialConfig(url, amqp.Config{Properties: amqp.Table{"connection_name": "sluice rabbitmq requeue"}})
	if err != nil {
		return 0, fmt.Errorf("rabbitmq: %w", err)
	}
	defer func() { err = errors.Join(err, ignoreClosed(conn.Close())) }()
	ch, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("rabbitmq: %w", err)
	}
	q, err := ch.QueueDeclarePassive(from, false, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("rabbitmq: --from: %w", err)
	}
	if limit == 0 {
		// Only what is there now: a consumer that dead-letters the
		// messages again must not make this loop forever.
		limit = q.Messages
	}
	pub, err := rabbitmq.NewPublisher(rabbitmq.PublisherConfig[amqp.Delivery]{
		URL: url, RoutingKey: to,
		Mandatory: true, // a message no queue takes is an error
		Confirms:  rabbitmq.Confirms{Enabled: true, WaitFor: true, Timeout: timeout},
		PubRetry:  rabbitmq.PubRetry{Enabled: true},
		// A dead letter the DeadLetterPublisher wrote gives back its item;
		// any other message goes as it is, properties kept, without the
		// headers of its earlier life (x-death, x-first-death-*,
		// x-last-death-*, x-delivery-count, the x-sluice-* story).
		Publishing: rabbitmq.Unwrap,
	})
	if err != nil {
		return 0, err
	}
	if err := pub.Open(interrupted); err != nil {
		if interrupted.Err() != nil {
			err = fmt.Errorf("interrupted while connecting: %w", err)
		}
		return 0, errors.Join(err, pub.Close(ctx))
	}
	defer func() { err = errors.Join(err, pub.Close(ctx)) }()
	if _, err := ch.QueueDeclarePassive(to, false, false, false, false, nil); err != nil {
		return 0, fmt.Errorf("rabbitmq: --to: %w", err)
	}
	// A message that cannot be published whatever is tried (a dead
	// letter whose item was never encoded, or whose envelope does not
	// decode) is held, unacked, while the rest are moved, and goes back
	// to where it was at the end: stopping at it would leave it at the
	// head of the queue, where every later requeue would stop again.
	var held []amqp.Delivery
	var reasons []error
	defer func() {
		for _, d := range held {
			err = errors.Join(err, d.Nack(false, true))
		}
		if len(held) > 0 {
			err = errors.Join(err, fmt.Errorf("%d messages left on %q, which no publish can move (on a quorum queue the return counts as one more delivery, toward its x-delivery-limit): %w",
				len(held), from, errors.Join(reasons...)))
		}
	}()
	for taken := 0; taken < limit; taken++ {
		if interrupted.Err() != nil {
			return moved, errors.New("interrupted: the messages after this count were not moved")
		}
		d, ok, err := ch.Get(from, false)
		if err != nil {
			return moved, fmt.Errorf("rabbitmq: get from %q: %w", from, err)
		}
		if !ok {
			return moved, nil // the queue is empty
		}
		published, err := rabbitmq.Unwrap(d)
		if err != nil {
			held = append(held, d)
			if len(reasons) < maxReasons {
				reasons = append(reasons, fmt.Errorf("message %d taken (message-id %q): %w", taken+1, d.MessageId, err))
			} else if len(reasons) == maxReasons {
				reasons = append(reasons, errors.New("and more"))
			}
			continue
		}
		before := pub.Resent()
		if err := pub.Write(ctx, d); err != nil {
			// Back where it was, for the next try. On a quorum queue the
			// return may count as a delivery: say so, since the broker
			// drops or dead-letters it past the queue's delivery limit.
			// A publish whose outcome is unknown (its confirm did not
			// come in time) may be on to as well: at least once.
			also := ""
			if errors.Is(err, rabbitmq.ErrOutcomeUnknown) {
				also = fmt.Sprintf(", and may be on %q too (%s): its outcome is unknown", to, nameOf(published, taken))
			}
			return moved, errors.Join(fmt.Errorf("rabbitmq: publish to %q: %w; the message went back to %q%s (on a quorum queue that counts as one more delivery, toward its x-delivery-limit)", to, err, from, also), d.Nack(false, true))
		}
		if pub.Resent() != before {
			resent(nameOf(published, taken))
		}
		if err := d.Ack(false); err != nil {
			return moved, fmt.Errorf("rabbitmq: ack on %q (the message is on %q too): %w", from, to, err)
		}
		moved++
	}
	return moved, nil
}

// nameOf names the message published to --to, the taken-th (from 0)
// taken from --from: by the message ID it went with (a dead letter's
// item's, not its envelope's), else by its place.
func nameOf(published amqp.Publishing, taken int) string {
	if published.MessageId != "" {
		return fmt.Sprintf("message-id %q", published.MessageId)
	}
	return fmt.Sprintf("message %d taken, without a message-id", taken+1)
}

// maxReasons is the most messages left behind that requeue names one by
// one.
const maxReasons = 10

func ignoreClosed(err error) error {
	if errors.Is(err, amqp.ErrClosed) {
		return nil
	}
	return err
}
