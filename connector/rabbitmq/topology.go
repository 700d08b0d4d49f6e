package rabbitmq

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicehq/sluice/resilience"
)

// retryQueueArgs returns the arguments the retry topology declares the
// retry queue that waits ttl with: x-message-ttl, x-dead-letter-exchange
// and x-queue-type.
func retryQueueArgs(cfg SourceConfig, queueType string, ttlMillis int64) amqp.Table {
	return amqp.Table{
		"x-message-ttl":          ttlMillis,
		"x-dead-letter-exchange": retryName(cfg.Queue),
		"x-queue-type":           queueType,
	}
}

// queueArgs returns the arguments a source declares its queue with: those
// of cfg.Declare, plus x-dead-letter-exchange when the retry topology is
// enabled. It returns nil when the source does not declare its queue.
func queueArgs(cfg SourceConfig) amqp.Table {
	if cfg.Declare == nil {
		return nil
	}
	args := maps.Clone(cfg.Declare.Args)
	if cfg.Retry.Enabled {
		if args == nil {
			args = amqp.Table{}
		}
		args["x-dead-letter-exchange"] = dlxName(cfg.Queue)
	}
	return args
}

// declare declares what cfg asks for: the queue (or checks the existing
// one), then the retry topology and the binding that brings retried
// messages back. Declaring is idempotent; an existing entity with other
// settings is refused by the broker with PRECONDITION_FAILED, which names
// the setting. It returns the queue's type.
func declare(conn *amqp.Connection, ch *amqp.Channel, cfg *SourceConfig) (string, error) {
	q, r := cfg.Queue, cfg.Retry
	qtype := cfg.queueType()
	if d := cfg.Declare; d != nil {
		if _, err := ch.QueueDeclare(q, d.Durable, d.AutoDelete, d.Exclusive, false, queueArgs(*cfg)); err != nil {
			return "", fmt.Errorf("rabbitmq: declare queue %q: %w", q, err)
		}
	} else {
		if _, err := ch.QueueDeclarePassive(q, false, false, false, false, nil); err != nil {
			return "", fmt.Errorf("rabbitmq: queue %q: %w", q, err)
		}
		if r.Enabled {
			t, err := checkExisting(conn, q)
			if err != nil {
				return "", err
			}
			qtype = t
		}
	}
	if !r.Enabled {
		return qtype, nil
	}
	if qtype == "stream" {
		return "", fmt.Errorf("rabbitmq: queue %q is a stream queue: it neither rejects nor dead-letters messages, so it cannot have a retry topology", q)
	}
	if qtype == "quorum" && (!r.Durable || r.AutoDelete) {
		return "", resilience.MarkPermanent(&ConfigError{Field: "Retry.Durable", Value: r.Durable,
			Reason: fmt.Sprintf("queue %q is a quorum queue: its retry queues copy its type, so they must be durable and not auto-delete", q)})
	}
	for _, ex := range []string{dlxName(q), retryName(q)} {
		if err := ch.ExchangeDeclare(ex, amqp.ExchangeFanout, r.Durable, r.AutoDelete, false, false, nil); err != nil {
			return "", fmt.Errorf("rabbitmq: declare exchange %q: %w", ex, err)
		}
	}
	for i, d := range r.tiers() {
		name := r.tierName(q, d)
		if _, err := ch.QueueDeclare(name, r.Durable, r.AutoDelete, false, false, retryQueueArgs(*cfg, qtype, d.Milliseconds())); err != nil {
			return "", fmt.Errorf("rabbitmq: declare retry queue %q: %w", name, err)
		}
		if i == 0 {
			// What the broker itself dead-letters out of q (a rejection)
			// waits the first tier. (A quorum queue's delivery limit is
			// not rescued this way: the broker drops a message whose
			// dead-letter cycle holds no rejection.)
			if err := ch.QueueBind(name, "", dlxName(q), false, nil); err != nil {
				return "", fmt.Errorf("rabbitmq: bind retry queue %q to %q: %w", name, dlxName(q), err)
			}
		}
	}
	if err := ch.QueueBind(q, "", retryName(q), false, nil); err != nil {
		return "", fmt.Errorf("rabbitmq: bind queue %q to %q: %w", q, retryName(q), err)
	}
	return qtype, nil
}

// checkExisting checks that the existing queue q dead-letters into the
// retry topology's exchange, and finds its type, without the management
// plugin: it declares q again with that dead-letter exchange, on a channel
// of its own each time (a refused declaration closes the channel). The
// broker compares the declaration with the queue and names the first
// setting that differs, with the queue's own value: Open takes that value
// and declares again, until the broker accepts (the queue is as checked)
// or names x-dead-letter-exchange (the queue dead-letters elsewhere or
// nowhere, and rejected messages would be dropped).
func checkExisting(conn *amqp.Connection, q string) (string, error) {
	durable, autoDelete := true, false
	args := amqp.Table{"x-dead-letter-exchange": dlxName(q)}
	var last string
	for range 16 {
		ch, err := conn.Channel()
		if err != nil {
			return "", fmt.Errorf("rabbitmq: check queue %q: open channel: %w", q, err)
		}
		_, err = ch.QueueDeclare(q, durable, autoDelete, false, false, args)
		if err == nil {
			_ = ch.Close()
			if t, ok := args["x-queue-type"].(string); ok && t != "" {
				return t, nil
			}
			return "classic", nil
		}
		var aerr *amqp.Error
		if !errors.As(err, &aerr) || aerr.Code != amqp.PreconditionFailed {
			_ = ch.Close()
			return "", fmt.Errorf("rabbitmq: check queue %q: %w", q, err)
		}
		last = aerr.Reason
		name, current, ok := inequivalent(aerr.Reason)
		if !ok {
			break
		}
		switch name {
		case "x-dead-letter-exchange":
			return "", resilience.MarkPermanent(&ConfigError{Field: "Retry.Enabled", Value: true, Reason: fmt.Sprintf(
				"queue %q exists without x-dead-letter-exchange = %q, so the retry topology cannot work (messages the broker rejects would be dropped): "+
					"declare the queue with that argument, or give SourceConfig.Declare so that Open declares it (the broker says: %s)",
				q, dlxName(q), aerr.Reason)})
		case "durable", "auto_delete":
			if current != "'true'" && current != "'false'" {
				break
			}
			if name == "durable" {
				durable = current == "'true'"
			} else {
				autoDelete = current == "'true'"
			}
			continue
		case "exclusive":
			// Another connection's queue: it cannot be consumed anyway.
		default:
			if current == "none" {
				delete(args, name)
				continue
			}
			if v, ok := argValue(current); ok {
				args[name] = v
				continue
			}
		}
		break
	}
	return "", resilience.MarkPermanent(&ConfigError{Field: "Declare", Value: nil, Reason: fmt.Sprintf(
		"cannot check that the existing queue %q dead-letters into %q: the broker refused the declarations Open tried (last: %s); "+
			"give SourceConfig.Declare with the queue's settings, so that Open declares it and the broker checks them",
		q, dlxName(q), last)})
}

// The broker's refusal of a declaration that differs from the queue reads
// "PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'q' in
// vhost '/': received none but current is the value '1000' of type
// 'signedint'", cut at 255 bytes (a long queue name can cut off the
// value).
var (
	inequivalentRE = regexp.MustCompile(`inequivalent arg '([^']+)'`)
	currentRE      = regexp.MustCompile(`but current is (none|'[^']*'|the value '[^']*' of type '[^']*')$`)
)

// inequivalent returns the setting a refusal names and the queue's own
// value of it, as the broker wrote it ("" when the text was cut before it).
func inequivalent(reason string) (name, current string, ok bool) {
	m := inequivalentRE.FindStringSubmatch(reason)
	if m == nil {
		return "", "", false
	}
	if c := currentRE.FindStringSubmatch(reason); c != nil {
		current = c[1]
	}
	return m[1], current, true
}

var argValueRE = regexp.MustCompile(`^the value '([^']*)' of type '([^']*)'$`)

// argValue turns the broker's "the value 'V' of type 'T'" into the Go
// value that AMQP encodes as that type.
func argValue(s string) (any, bool) {
	m := argValueRE.FindStringSubmatch(s)
	if m == nil {
		return nil, false
	}
	v, t := m[1], m[2]
	var err error
	var out any
	switch t {
	case "longstr":
		return v, true
	case "bool":
		out, err = strconv.ParseBool(v)
	case "long":
		out, err = strconv.ParseInt(v, 10, 64)
	case "signedint":
		var n int64
		n, err = strconv.ParseInt(v, 10, 32)
		out = int32(n)
	case "short":
		var n int64
		n, err = strconv.ParseInt(v, 10, 16)
		out = int16(n)
	case "byte":
		var n int64
		n, err = strconv.ParseInt(v, 10, 8)
		out = int8(n)
	case "double":
		out, err = strconv.ParseFloat(v, 64)
	case "float":
		var f float64
		f, err = strconv.ParseFloat(v, 32)
		out = float32(f)
	default:
		return nil, false
	}
	return out, err == nil
}
