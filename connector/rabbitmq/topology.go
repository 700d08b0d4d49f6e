package rabbitmq

import (
	"fmt"
	"maps"

	amqp "github.com/rabbitmq/amqp091-go"
)

// retryQueueArgs returns the arguments the retry topology declares the
// retry queue of cfg's queue with: x-message-ttl, x-dead-letter-exchange and
// x-queue-type.
func retryQueueArgs(cfg SourceConfig) amqp.Table {
	return amqp.Table{
		"x-message-ttl":          cfg.Retry.Delay.Milliseconds(),
		"x-dead-letter-exchange": retryName(cfg.Queue),
		"x-queue-type":           cfg.queueType(),
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

// declare declares what cfg asks for on ch: the retry topology, then the
// queue (or checks that it exists), then the binding that brings retried
// messages back. Declaring is idempotent; an existing entity with other
// settings is refused by the broker with PRECONDITION_FAILED, which names
// the setting.
func declare(ch *amqp.Channel, cfg *SourceConfig) error {
	q, r := cfg.Queue, cfg.Retry
	if r.Enabled {
		for _, ex := range []string{dlxName(q), retryName(q)} {
			if err := ch.ExchangeDeclare(ex, amqp.ExchangeFanout, r.Durable, r.AutoDelete, false, false, nil); err != nil {
				return fmt.Errorf("rabbitmq: declare exchange %q: %w", ex, err)
			}
		}
		if _, err := ch.QueueDeclare(retryName(q), r.Durable, r.AutoDelete, false, false, retryQueueArgs(*cfg)); err != nil {
			return fmt.Errorf("rabbitmq: declare retry queue %q: %w", retryName(q), err)
		}
		if err := ch.QueueBind(retryName(q), "", dlxName(q), false, nil); err != nil {
			return fmt.Errorf("rabbitmq: bind retry queue %q to %q: %w", retryName(q), dlxName(q), err)
		}
	}
	if d := cfg.Declare; d != nil {
		if _, err := ch.QueueDeclare(q, d.Durable, d.AutoDelete, d.Exclusive, false, queueArgs(*cfg)); err != nil {
			return fmt.Errorf("rabbitmq: declare queue %q: %w", q, err)
		}
	} else if _, err := ch.QueueDeclarePassive(q, false, false, false, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: queue %q: %w", q, err)
	}
	if r.Enabled {
		if err := ch.QueueBind(q, "", retryName(q), false, nil); err != nil {
			return fmt.Errorf("rabbitmq: bind queue %q to %q: %w", q, retryName(q), err)
		}
	}
	return nil
}
