// Package servicetest finds the external services that integration tests
// need, such as a RabbitMQ broker, and decides what a test does when one is
// missing: on a developer's machine it skips with a message that says how to
// provide the service; in CI, where SLUICE_REQUIRE_SERVICES=1, it fails, so
// that a broken service never turns the suite silently green.
package servicetest

import (
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RequireEnv is the variable that turns a missing service into a test
// failure when it is "1".
const RequireEnv = "SLUICE_REQUIRE_SERVICES"

// RabbitMQEnv is the variable that overrides the URL of the RabbitMQ broker.
const RabbitMQEnv = "SLUICE_RABBITMQ_URL"

// DefaultRabbitMQURL is the broker the tests use when RabbitMQEnv is not set:
// a local broker with the default account.
const DefaultRabbitMQURL = "amqp://guest:guest@127.0.0.1:5672/"

// probeTimeout bounds the check that a broker answers; a broker on the
// local network answers in milliseconds.
const probeTimeout = 2 * time.Second

var rabbit struct {
	once sync.Once
	url  string
	err  error
}

// RabbitMQ returns the URL of a RabbitMQ broker that answered an AMQP
// handshake. When none answers it skips t, or fails it when
// SLUICE_REQUIRE_SERVICES=1. The broker is probed once per test binary; the
// URL is SLUICE_RABBITMQ_URL, or [DefaultRabbitMQURL].
func RabbitMQ(t testing.TB) string {
	t.Helper()
	rabbit.once.Do(func() {
		rabbit.url = os.Getenv(RabbitMQEnv)
		if rabbit.url == "" {
			rabbit.url = DefaultRabbitMQURL
		}
		rabbit.err = probeRabbitMQ(rabbit.url)
	})
	if rabbit.err != nil {
		missing(t, fmt.Sprintf("RabbitMQ not reachable at %s (%v); set %s or start one; CI sets %s=1 to make this a failure",
			redact(rabbit.url), rabbit.err, RabbitMQEnv, RequireEnv))
	}
	return rabbit.url
}

// Required reports whether missing services fail tests instead of skipping
// them.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

func missing(t testing.TB, msg string) {
	t.Helper()
	if Required() {
		t.Fatal(msg)
		return
	}
	t.Skip(msg)
}

func probeRabbitMQ(u string) error {
	conn, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(probeTimeout)})
	if err != nil {
		return err
	}
	return conn.CloseDeadline(time.Now().Add(probeTimeout))
}

// redact hides the password of u, so that a skip message can be logged.
func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return p.Redacted()
}
