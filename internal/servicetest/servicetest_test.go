package servicetest_test

import (
	"fmt"
	"net"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/internal/servicetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A fakeT records what RabbitMQ asks of its test instead of ending it.
type fakeT struct {
	testing.TB
	skipped, fatal string
}

func (f *fakeT) Helper()             {}
func (f *fakeT) Skip(args ...any)    { f.skipped = fmt.Sprint(args...) }
func (f *fakeT) Fatal(args ...any)   { f.fatal = fmt.Sprint(args...) }
func (f *fakeT) Name() string        { return "fake" }
func (f *fakeT) Logf(string, ...any) {}

// TestMissingBroker points the helper at a port nobody listens on: it
// skips, saying how to provide a broker, or fails when services are
// required. (The probe runs once per binary, so these tests forget it
// before and after, and do not run in parallel.)
func TestMissingBroker(t *testing.T) {
	forgetProbes(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	t.Setenv(servicetest.RabbitMQEnv, "amqp://guest:secret@"+addr+"/")

	t.Setenv(servicetest.RequireEnv, "")
	ft := &fakeT{TB: t}
	servicetest.RabbitMQ(ft)
	assert.Empty(t, ft.fatal)
	assert.Contains(t, ft.skipped, "RabbitMQ not reachable at amqp://guest:xxxxx@"+addr+"/")
	assert.Contains(t, ft.skipped, "set SLUICE_RABBITMQ_URL or start one")
	assert.NotContains(t, ft.skipped, "secret", "the password is not logged")

	t.Setenv(servicetest.RequireEnv, "1")
	ft = &fakeT{TB: t}
	servicetest.RabbitMQ(ft)
	assert.Empty(t, ft.skipped)
	assert.Contains(t, ft.fatal, "CI sets SLUICE_REQUIRE_SERVICES=1 to make this a failure")
}

// forgetProbes forgets what the helpers found, now and when t ends.
func forgetProbes(t *testing.T) {
	servicetest.ForgetProbes()
	t.Cleanup(servicetest.ForgetProbes)
}

// closedAddr returns an address on which nobody listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// TestMissingPostgres is TestMissingBroker for PostgreSQL; the password
// in the query is hidden too.
func TestMissingPostgres(t *testing.T) {
	forgetProbes(t)
	addr := closedAddr(t)
	t.Setenv(servicetest.PostgresEnv, "postgres://app:secret@"+addr+"/test?sslmode=disable&password=secret2")

	t.Setenv(servicetest.RequireEnv, "")
	ft := &fakeT{TB: t}
	servicetest.Postgres(ft)
	assert.Empty(t, ft.fatal)
	assert.Contains(t, ft.skipped, "PostgreSQL not reachable at postgres://app:xxxxx@"+addr+"/test?")
	assert.Contains(t, ft.skipped, "set SLUICE_POSTGRES_URL or start one")
	assert.NotContains(t, ft.skipped, "secret", "no password is logged")

	t.Setenv(servicetest.RequireEnv, "1")
	ft = &fakeT{TB: t}
	servicetest.Postgres(ft)
	assert.Empty(t, ft.skipped)
	assert.Contains(t, ft.fatal, "CI sets SLUICE_REQUIRE_SERVICES=1 to make this a failure")
}

// TestMissingRedis is TestMissingBroker for Redis.
func TestMissingRedis(t *testing.T) {
	forgetProbes(t)
	addr := closedAddr(t)
	t.Setenv(servicetest.RedisEnv, addr)

	t.Setenv(servicetest.RequireEnv, "")
	ft := &fakeT{TB: t}
	servicetest.Redis(ft)
	assert.Empty(t, ft.fatal)
	assert.Contains(t, ft.skipped, "Redis not reachable at "+addr+" (")
	assert.Contains(t, ft.skipped, "set SLUICE_REDIS_ADDR or start one")

	t.Setenv(servicetest.RequireEnv, "1")
	ft = &fakeT{TB: t}
	servicetest.Redis(ft)
	assert.Empty(t, ft.skipped)
	assert.Contains(t, ft.fatal, "CI sets SLUICE_REQUIRE_SERVICES=1 to make this a failure")
}

// TestMissingNATS is TestMissingBroker for NATS; the password is hidden.
func TestMissingNATS(t *testing.T) {
	forgetProbes(t)
	addr := closedAddr(t)
	t.Setenv(servicetest.NATSEnv, "nats://app:secret@"+addr)

	t.Setenv(servicetest.RequireEnv, "")
	ft := &fakeT{TB: t}
	servicetest.NATS(ft)
	assert.Empty(t, ft.fatal)
	assert.Contains(t, ft.skipped, "NATS with JetStream not reachable at nats://app:xxxxx@"+addr+" (")
	assert.Contains(t, ft.skipped, "set SLUICE_NATS_URL or start one")
	assert.NotContains(t, ft.skipped, "secret", "no password is logged")

	t.Setenv(servicetest.RequireEnv, "1")
	ft = &fakeT{TB: t}
	servicetest.NATS(ft)
	assert.Empty(t, ft.skipped)
	assert.Contains(t, ft.fatal, "CI sets SLUICE_REQUIRE_SERVICES=1 to make this a failure")
}
