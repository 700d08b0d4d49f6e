// Package servicetest finds the external services that integration tests
// need, such as a RabbitMQ broker, a NATS server, a PostgreSQL server or a
// Redis server, and decides what a test does when one is missing: on a
// developer's machine it skips with a message that says how to
// provide the service; in CI, where SLUICE_REQUIRE_SERVICES=1, it fails, so
// that a broken service never turns the suite silently green.
//
// The probes speak each service's protocol with the standard library only
// (see probe.go), so that the modules whose tests use this package do not
// list every service's client in their go.mod, and through them in their
// users' module graphs.
package servicetest

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// RequireEnv is the variable that turns a missing service into a test
// failure when it is "1".
const RequireEnv = "SLUICE_REQUIRE_SERVICES"

// RabbitMQEnv is the variable that overrides the URL of the RabbitMQ broker.
const RabbitMQEnv = "SLUICE_RABBITMQ_URL"

// DefaultRabbitMQURL is the broker the tests use when RabbitMQEnv is not set:
// a local broker with the default account.
const DefaultRabbitMQURL = "amqp://guest:guest@127.0.0.1:5672/"

// probeTimeout bounds each probe, from the dial to the last answer; a
// service on the local network answers in milliseconds. The package's tests
// shorten it.
var probeTimeout = 2 * time.Second

// A probe finds a service once per test binary: target is where it was
// looked for, err why it did not answer.
type probe struct {
	once   sync.Once
	target string
	err    error
}

// find looks for the service at the address in env, or at def, with check,
// the first time it is called.
func (p *probe) find(env, def string, check func(string) error) (string, error) {
	p.once.Do(func() {
		p.target = os.Getenv(env)
		if p.target == "" {
			p.target = def
		}
		p.err = check(p.target)
	})
	return p.target, p.err
}

// The probes of the services, replaced by the package's tests.
var rabbit, postgres, redisServer, natsServer, mariaDB = &probe{}, &probe{}, &probe{}, &probe{}, &probe{}

// RabbitMQ returns the URL of a RabbitMQ broker that accepted an AMQP
// 0-9-1 login (the URL's user, password and virtual host). When none answers it skips t, or fails it when
// SLUICE_REQUIRE_SERVICES=1. The broker is probed once per test binary; the
// URL is SLUICE_RABBITMQ_URL, or [DefaultRabbitMQURL].
func RabbitMQ(t testing.TB) string {
	t.Helper()
	u, err := rabbit.find(RabbitMQEnv, DefaultRabbitMQURL, probeRabbitMQ)
	if err != nil {
		missing(t, fmt.Sprintf("RabbitMQ not reachable at %s (%v); set %s or start one; CI sets %s=1 to make this a failure",
			redact(u), err, RabbitMQEnv, RequireEnv))
	}
	return u
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

// PostgresEnv is the variable that overrides the connection URL of the
// PostgreSQL server.
const PostgresEnv = "SLUICE_POSTGRES_URL"

// DefaultPostgresURL is the server the tests use when PostgresEnv is not
// set: a local server that trusts local connections, with a database
// named test.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// Postgres returns the connection URL of a PostgreSQL server that accepted
// a session for the URL's user and database (a server that asks for a
// password is taken as found: the probe does not log in with one). When none does it skips t, or fails it
// when SLUICE_REQUIRE_SERVICES=1. The server is probed once per test
// binary; the URL is SLUICE_POSTGRES_URL, or [DefaultPostgresURL]. Tests
// share the database: each should use tables of its own and drop them.
func Postgres(t testing.TB) string {
	t.Helper()
	u, err := postgres.find(PostgresEnv, DefaultPostgresURL, probePostgres)
	if err != nil {
		missing(t, fmt.Sprintf("PostgreSQL not reachable at %s (%v); set %s or start one; CI sets %s=1 to make this a failure",
			redact(u), err, PostgresEnv, RequireEnv))
	}
	return u
}

// RedisEnv is the variable that overrides the address of the Redis server.
const RedisEnv = "SLUICE_REDIS_ADDR"

// DefaultRedisAddr is the server the tests use when RedisEnv is not set: a
// local server on the default port, without a password.
const DefaultRedisAddr = "127.0.0.1:6379"

// Redis returns the address (host:port) of a Redis server that answered a
// PING. When none does it skips t, or fails it when
// SLUICE_REQUIRE_SERVICES=1. The server is probed once per test binary;
// the address is SLUICE_REDIS_ADDR, or [DefaultRedisAddr]. Tests share the
// server's database 0: each should use keys of its own and delete them.
func Redis(t testing.TB) string {
	t.Helper()
	addr, err := redisServer.find(RedisEnv, DefaultRedisAddr, probeRedis)
	if err != nil {
		missing(t, fmt.Sprintf("Redis not reachable at %s (%v); set %s or start one; CI sets %s=1 to make this a failure",
			addr, err, RedisEnv, RequireEnv))
	}
	return addr
}

// NATSEnv is the variable that overrides the URL of the NATS server.
const NATSEnv = "SLUICE_NATS_URL"

// DefaultNATSURL is the server the tests use when NATSEnv is not set: a
// local server on the default port, without credentials.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// NATS returns the URL of a NATS server that announced JetStream and
// accepted the URL's credentials. When none does it skips t, or
// fails it when SLUICE_REQUIRE_SERVICES=1. The server is probed once per
// test binary; the URL is SLUICE_NATS_URL, or [DefaultNATSURL]. Tests share
// the server: each should use streams of its own and delete them.
func NATS(t testing.TB) string {
	t.Helper()
	u, err := natsServer.find(NATSEnv, DefaultNATSURL, probeNATS)
	if err != nil {
		missing(t, fmt.Sprintf("NATS with JetStream not reachable at %s (%v); set %s or start one (nats-server -js); CI sets %s=1 to make this a failure",
			redact(u), err, NATSEnv, RequireEnv))
	}
	return u
}

// MariaDBEnv is the variable that overrides the data source name of the
// MariaDB (or MySQL) server.
const MariaDBEnv = "SLUICE_MARIADB_DSN"

// DefaultMariaDBDSN is the server the tests use when MariaDBEnv is not set:
// a local server whose root user has no password, with a database named
// test, in go-sql-driver/mysql's form.
const DefaultMariaDBDSN = "root@tcp(127.0.0.1:3306)/test"

// MariaDB returns the data source name, in go-sql-driver/mysql's form, of
// a MariaDB or MySQL server that sent its protocol greeting (the probe does
// not log in). When none does it skips t, or fails it when
// SLUICE_REQUIRE_SERVICES=1. The server is probed once per test binary;
// the DSN is SLUICE_MARIADB_DSN, or [DefaultMariaDBDSN]. Tests share the
// database: each should use tables of its own and drop them.
func MariaDB(t testing.TB) string {
	t.Helper()
	dsn, err := mariaDB.find(MariaDBEnv, DefaultMariaDBDSN, probeMariaDB)
	if err != nil {
		missing(t, fmt.Sprintf("MariaDB not reachable at %s (%v); set %s or start one; CI sets %s=1 to make this a failure",
			redactDSN(dsn), err, MariaDBEnv, RequireEnv))
	}
	return dsn
}

// redactDSN hides the password of a DSN in go-sql-driver/mysql's form.
func redactDSN(dsn string) string {
	at := strings.LastIndex(dsn, "@")
	if at < 0 {
		return dsn
	}
	if user, _, ok := strings.Cut(dsn[:at], ":"); ok {
		return user + ":xxxxx" + dsn[at:]
	}
	return dsn
}

// redact hides the password of u, so that a skip message can be logged.
// A PostgreSQL URL may carry it in its query too; a connection string that
// is not a URL ("host=... password=...") is not shown at all.
func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Scheme == "" {
		return "(unparsable URL)"
	}
	if q := p.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		p.RawQuery = q.Encode()
	}
	return p.Redacted()
}
