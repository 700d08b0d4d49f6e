package servicetest_test

import (
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/internal/servicetest"
)

// The probes, each with the address of a fake server in the form its
// helper reads (a URL, or host:port for Redis).
var probes = []struct {
	name  string
	probe func(string) error
	at    func(addr string) string
}{
	{"RabbitMQ", servicetest.ProbeRabbitMQ, func(a string) string { return "amqp://guest:guest@" + a + "/" }},
	{"PostgreSQL", servicetest.ProbePostgres, func(a string) string { return "postgres://postgres@" + a + "/test?sslmode=disable" }},
	{"PostgreSQL with SSLRequest", servicetest.ProbePostgres, func(a string) string { return "postgres://postgres@" + a + "/test" }},
	{"Redis", servicetest.ProbeRedis, func(a string) string { return a }},
	{"NATS", servicetest.ProbeNATS, func(a string) string { return "nats://" + a }},
	{"MariaDB", servicetest.ProbeMariaDB, func(a string) string { return "root@tcp(" + a + ")/test" }},
}

// fakeServer accepts connections on a local port and hands each to serve;
// it stops, and closes what it accepted, when the test ends.
func fakeServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// TestProbesFailFastOnStrangers points every probe at servers that are
// not the service: one that answers garbage, one that closes at once, one
// that reads and never answers. Each probe fails with an error that says
// which, within its deadline, rather than hanging.
func TestProbesFailFastOnStrangers(t *testing.T) {
	servicetest.SetProbeTimeout(t.Cleanup, 200*time.Millisecond)
	strangers := []struct {
		name  string
		serve func(net.Conn)
		want  []string // one of these is in the error
	}{
		{"garbage", func(c net.Conn) {
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
			io.Copy(io.Discard, c)
		}, []string{"not a", "does not speak"}},
		{"closes", func(c net.Conn) { c.Close() }, []string{"closed the connection", "connection reset"}},
		{"silent", func(c net.Conn) { io.Copy(io.Discard, c) }, []string{"no answer within 200ms"}},
	}
	for _, s := range strangers {
		addr := fakeServer(t, s.serve)
		for _, p := range probes {
			t.Run(s.name+"/"+p.name, func(t *testing.T) {
				start := time.Now()
				err := p.probe(p.at(addr))
				require.Error(t, err)
				assert.Less(t, time.Since(start), 2*time.Second, "the probe gives up at its deadline")
				found := false
				for _, w := range s.want {
					found = found || strings.Contains(err.Error(), w)
				}
				assert.True(t, found, "error %q says none of %q", err, s.want)
			})
		}
	}
}

// TestProbesOnAClosedPort: nothing listens, the dial fails.
func TestProbesOnAClosedPort(t *testing.T) {
	addr := closedAddr(t)
	for _, p := range probes {
		err := p.probe(p.at(addr))
		require.Error(t, err, p.name)
		assert.Contains(t, err.Error(), "refused", p.name)
	}
}

// TestNATSWithoutJetStream: a NATS server whose INFO does not announce
// JetStream is not enough for the connector's tests.
func TestNATSWithoutJetStream(t *testing.T) {
	servicetest.SetProbeTimeout(t.Cleanup, time.Second)
	addr := fakeServer(t, func(c net.Conn) {
		c.Write([]byte(`INFO {"server_id":"x","version":"2.10.0","max_payload":1048576}` + "\r\n"))
		io.Copy(io.Discard, c)
	})
	err := servicetest.ProbeNATS("nats://" + addr)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not have JetStream enabled")
}

// service returns the address of a real service, or skips t when the
// helper finds none (it fails when services are required).
func service(t *testing.T, find func(testing.TB) string) string {
	t.Helper()
	return find(t)
}

// TestProbesFindTheRealServices runs each probe against the service on
// this machine, and again with what the service must refuse, so that the
// probes are shown to speak the protocol and not only to connect.
func TestProbesFindTheRealServices(t *testing.T) {
	t.Run("RabbitMQ", func(t *testing.T) {
		u := service(t, servicetest.RabbitMQ)
		require.NoError(t, servicetest.ProbeRabbitMQ(u))

		wrong, err := url.Parse(u)
		require.NoError(t, err)
		wrong.User = url.UserPassword(wrong.User.Username(), "not-the-password")
		err = servicetest.ProbeRabbitMQ(wrong.String())
		require.Error(t, err)
		assert.Contains(t, err.Error(), "403", "ACCESS_REFUSED")

		wrong, _ = url.Parse(u)
		wrong.Path = "/no-such-vhost"
		err = servicetest.ProbeRabbitMQ(wrong.String())
		require.Error(t, err)
		assert.Contains(t, err.Error(), "530", "NOT_ALLOWED")
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		u := service(t, servicetest.Postgres)
		require.NoError(t, servicetest.ProbePostgres(u))

		wrong, err := url.Parse(u)
		require.NoError(t, err)
		wrong.Path = "/no_such_database_sluice"
		err = servicetest.ProbePostgres(wrong.String())
		require.Error(t, err)
		assert.Contains(t, err.Error(), `database "no_such_database_sluice" does not exist`)
	})
	t.Run("Redis", func(t *testing.T) {
		addr := service(t, servicetest.Redis)
		require.NoError(t, servicetest.ProbeRedis(addr))
	})
	t.Run("NATS", func(t *testing.T) {
		u := service(t, servicetest.NATS)
		require.NoError(t, servicetest.ProbeNATS(u))
	})
	t.Run("MariaDB", func(t *testing.T) {
		dsn := service(t, servicetest.MariaDB)
		require.NoError(t, servicetest.ProbeMariaDB(dsn))
	})
}

// TestMariaDBRefusal: a server whose greeting is an error packet (here
// "Too many connections") is reported with the server's message.
func TestMariaDBRefusal(t *testing.T) {
	servicetest.SetProbeTimeout(t.Cleanup, time.Second)
	addr := fakeServer(t, func(c net.Conn) {
		msg := "\xff\x10\x04Too many connections"
		c.Write([]byte{byte(len(msg)), 0, 0, 0})
		c.Write([]byte(msg))
		io.Copy(io.Discard, c)
	})
	err := servicetest.ProbeMariaDB("root@tcp(" + addr + ")/test")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "refused the connection: Too many connections")
}

// TestMySQLAddr reads the address of the DSN forms the tests may be given.
func TestMySQLAddr(t *testing.T) {
	for dsn, want := range map[string]string{
		"root@tcp(127.0.0.1:3306)/test":            "127.0.0.1:3306",
		"app:p@ss@tcp(db.example:3307)/x?tls=true": "db.example:3307",
		"root@tcp(db)/test":                        "db:3306",
		"root@/test":                               "127.0.0.1:3306",
		"/test":                                    "127.0.0.1:3306",
	} {
		got, err := servicetest.MySQLAddr(dsn)
		require.NoError(t, err, dsn)
		assert.Equal(t, want, got, dsn)
	}
	for _, dsn := range []string{"root@unix(/run/mysqld.sock)/test", "no database"} {
		_, err := servicetest.MySQLAddr(dsn)
		assert.Error(t, err, dsn)
	}
	assert.Equal(t, "app:xxxxx@tcp(h:1)/d", servicetest.RedactDSN("app:secret@tcp(h:1)/d"))
	assert.Equal(t, "root@tcp(h:1)/d", servicetest.RedactDSN("root@tcp(h:1)/d"))
}
