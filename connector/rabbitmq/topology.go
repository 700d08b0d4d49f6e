package rabbitmq

import (
	"errors"
	"fmt"
	"maps"
	"strings"

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
			// What the broker itself dead-letters out of q (a quorum
			// queue's delivery limit, a rejection) waits the first tier.
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
// plugin: it declares q again, with that dead-letter exchange, as each
// queue type and durability in turn, on a channel of its own (a refused
// declaration closes the channel). The broker accepts the declaration that
// matches the queue as it is; a refusal that names x-dead-letter-exchange
// means the queue has another or none, and rejected messages would be
// dropped.
func checkExisting(conn *amqp.Connection, q string) (string, error) {
	var refusals []string
	dlxWrong := false
candidates:
	for _, qtype := range []string{"classic", "quorum"} {
		for _, durable := range []bool{true, false} {
			if qtype == "quorum" && !durable {
				continue
			}
			ch, err := conn.Channel()
			if err != nil {
				return "", fmt.Errorf("rabbitmq: check queue %q: open channel: %w", q, err)
			}
			_, err = ch.QueueDeclare(q, durable, false, false, false, amqp.Table{
				"x-dead-letter-exchange": dlxName(q), "x-queue-type": qtype,
			})
			if err == nil {
				_ = ch.Close()
				return qtype, nil
			}
			var aerr *amqp.Error
			if !errors.As(err, &aerr) || aerr.Code != amqp.PreconditionFailed {
				_ = ch.Close()
				return "", fmt.Errorf("rabbitmq: check queue %q: %w", q, err)
			}
			refusals = append(refusals, aerr.Reason)
			if strings.Contains(aerr.Reason, "x-dead-letter-exchange") {
				// The broker compared it: the queue has another, or none.
				dlxWrong = true
				_ = ch.Close()
				break candidates
			}
		}
	}
	if dlxWrong {
		return "", resilience.MarkPermanent(&ConfigError{Field: "Retry.Enabled", Value: true, Reason: fmt.Sprintf(
			"queue %q exists without x-dead-letter-exchange = %q, so the retry topology cannot work (messages the broker rejects would be dropped): "+
				"declare the queue with that argument, or give SourceConfig.Declare so that Open declares it (the broker says: %s)",
			q, dlxName(q), refusals[len(refusals)-1])})
	}
	return "", resilience.MarkPermanent(&ConfigError{Field: "Declare", Value: nil, Reason: fmt.Sprintf(
		"cannot check that the existing queue %q dead-letters into %q: the broker refused every declaration Open tried (%s); "+
			"give SourceConfig.Declare with the queue's settings, so that Open declares it and the broker checks them",
		q, dlxName(q), strings.Join(refusals, "; "))})
}
