package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/resilience"
)

// ErrInvalidConfig is matched by every [*ConfigError] with [errors.Is].
var ErrInvalidConfig = errors.New("kafka: invalid config")

// A ConfigError reports one invalid setting of a connector's config, or a
// topic on the cluster that does not fit it. Field is the path of the
// setting, such as "Brokers[0]".
type ConfigError struct {
	// Field is the path of the setting, such as "Brokers[0]".
	Field string
	// Value is the refused value.
	Value any
	// Reason says why the value is refused.
	Reason string
}

// Error names the field, its value and why it is refused.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("kafka: %s = %v: %s", e.Field, e.Value, e.Reason)
}

// Is reports whether target is [ErrInvalidConfig].
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// ErrConnectionLost is matched by the error of a source whose client can
// no longer reach the cluster. Such an error is transient: reconnecting
// can fix it, and node restart does (see [Source]).
var ErrConnectionLost = errors.New("kafka: connection lost")

// ErrNotOpen is returned by Run when the source was not opened; the
// pipeline calls Open before Run.
var ErrNotOpen = errors.New("kafka: not open")

// ErrUnknownTopic is matched by the error of Open when the topic does not
// exist on the cluster. It is permanent: create the topic first.
var ErrUnknownTopic = errors.New("kafka: unknown topic")

// connectionLost reports whether err says that the cluster could not be
// reached, as opposed to a broker refusing a request.
func connectionLost(err error) bool {
	if err == nil {
		return false
	}
	for _, target := range []error{ErrConnectionLost, kgo.ErrClientClosed, io.EOF, io.ErrUnexpectedEOF, net.ErrClosed} {
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

// classify marks err for the pipeline's classifiers: a lost connection, a
// request that timed out and an error Kafka calls retriable are
// transient; another refusal by a broker is permanent. Other errors keep
// their own nature.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if connectionLost(err) || errors.Is(err, context.DeadlineExceeded) || kerr.IsRetriable(err) {
		return resilience.MarkTransient(err)
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return resilience.MarkPermanent(err)
	}
	return err
}
