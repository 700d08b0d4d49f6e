package nats

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/resilience"
)

// ErrInvalidConfig is matched by every [*ConfigError] with [errors.Is].
var ErrInvalidConfig = errors.New("nats: invalid config")

// A ConfigError reports one invalid setting of a connector's config, or a
// stream or consumer on the server that differs from it. Field is the path
// of the setting, such as "Retry.Delay".
type ConfigError struct {
	// Field is the path of the setting, such as "Retry.Delay".
	Field string
	// Value is the refused value, or a stand-in such as "(hidden)" for a
	// URL that may hold a password.
	Value any
	// Reason says why the value is refused.
	Reason string
}

// Error names the field, its value and why it is refused.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("nats: %s = %v: %s", e.Field, e.Value, e.Reason)
}

// Is reports whether target is [ErrInvalidConfig].
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// ErrConnectionLost is matched by the error of a source or publisher whose
// connection went away. Such an error is transient: reconnecting can fix
// it, and node restart does (see [Source]).
var ErrConnectionLost = errors.New("nats: connection lost")

// ErrNotOpen is returned by Run when the source was not opened, and by a
// Publisher's Write after Close; the pipeline calls Open before either.
var ErrNotOpen = errors.New("nats: not open")

// ErrPoison is matched by the error in the dead-letter envelope of a
// message that the source stopped delivering because it failed
// SourceConfig.MaxDeliveries runs (see [HeaderFailures]).
var ErrPoison = errors.New("nats: poison message")

// ErrAckTimeout is matched by a [*PubAckError] whose publish was not
// acknowledged by the stream within the timeout.
var ErrAckTimeout = errors.New("nats: publish not acknowledged in time")

// A PubAckError is a publish that the stream did not acknowledge within
// PublisherConfig.AckTimeout. It reaches the pipeline marked transient and
// blameless (the late answer is not the message's fault),
// for item retry: the stream may have stored the message anyway, and a
// retry with the same Nats-Msg-Id inside the stream's duplicate window is
// absorbed by the stream.
type PubAckError struct {
	// Subject is the publish's subject.
	Subject string
	// Timeout is the wait for the PubAck that ran out.
	Timeout time.Duration
}

// Error says which publish was not acknowledged.
func (e *PubAckError) Error() string {
	return fmt.Sprintf("nats: publish to subject %q not acknowledged within %s", e.Subject, e.Timeout)
}

// Is reports whether target is [ErrAckTimeout]. The stream may have
// stored the message: it also matches [ErrOutcomeUnknown] and
// idempotency.ErrUnknownOutcome.
func (e *PubAckError) Is(target error) bool {
	return target == ErrAckTimeout || target == ErrOutcomeUnknown || target == idempotency.ErrUnknownOutcome
}

// ErrOutcomeUnknown is matched by the error of a publish that the stream
// may have stored, or not: its PubAck did not come in time, or the
// connection went away after it was sent, or the publisher closed before a
// retry. Counting such a publish as failed is not safe: a retry outside
// the stream's duplicate window may store the message twice. It also
// matches idempotency.ErrUnknownOutcome, so that an idempotency guard
// around the publisher keeps the item's claim.
var ErrOutcomeUnknown = errors.New("nats: publish outcome unknown")

// unknownError is a publish error whose outcome is unknown.
type unknownError struct{ err error }

func (e *unknownError) Error() string {
	return e.err.Error() + " (outcome unknown: the stream may have stored the message)"
}

func (e *unknownError) Unwrap() error { return e.err }

func (e *unknownError) Is(target error) bool {
	return target == ErrOutcomeUnknown || target == idempotency.ErrUnknownOutcome
}

// outcomeUnknown marks err as a publish whose outcome is unknown; a
// PubAckError says so already.
func outcomeUnknown(err error) error {
	if errors.Is(err, ErrOutcomeUnknown) {
		return err
	}
	return &unknownError{err}
}

// blameless marks err transient and not the message's fault: the server
// was away, refused it for the stream's state (full, no leader), or did
// not answer in time.
func blameless(err error) error { return resilience.MarkBlameless(resilience.MarkTransient(err)) }

// unavailable reports whether err is JetStream's answer that it cannot
// take the message now (HTTP-like code 503: a stream at its count limits
// with DiscardNew, insufficient resources, no leader), a state of the
// stream, not of the message. A stream at its byte limit is not: the same
// answer comes for a message larger than the stream's MaxBytes, every
// time (transient only, for item retry, which then blames the message).
func unavailable(err error) (state, bytes bool) {
	var ae *jetstream.APIError
	if !errors.As(err, &ae) || ae.Code != 503 {
		return false, false
	}
	if strings.Contains(ae.Description, "bytes") {
		return false, true
	}
	return true, false
}

// connectionLost reports whether err says that the connection went away
// or could not be reached, as opposed to the server refusing an operation
// (an unknown stream, a consumer that differs), which fails again on a new
// connection.
func connectionLost(err error) bool {
	if err == nil {
		return false
	}
	for _, target := range []error{ErrConnectionLost, natsgo.ErrConnectionClosed, natsgo.ErrDisconnected,
		natsgo.ErrConnectionDraining, natsgo.ErrNoServers, natsgo.ErrStaleConnection,
		jetstream.ErrMsgIteratorClosed, io.EOF, io.ErrUnexpectedEOF, net.ErrClosed} {
		if errors.Is(err, target) {
			return true
		}
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var errno syscall.Errno
	return errors.As(err, &errno)
}

// classify marks err for the pipeline's classifiers: a lost connection or
// a request that timed out is transient, a refusal by the server (a
// JetStream API error) is permanent. Other errors keep their own nature.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if connectionLost(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, natsgo.ErrTimeout) {
		return resilience.MarkTransient(err)
	}
	var ae *jetstream.APIError
	if errors.As(err, &ae) || errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
		return resilience.MarkPermanent(err)
	}
	return err
}
