package servicetest

import "time"

// ForgetProbes makes the next call of each helper probe its service again,
// so that a test can point a helper at a missing service whatever the
// tests before it (or an earlier run under -count) found.
func ForgetProbes() {
	rabbit, postgres, redisServer, natsServer, mariaDB = &probe{}, &probe{}, &probe{}, &probe{}, &probe{}
}

// The probes, for tests that point them at a server of their own.
var (
	ProbeRabbitMQ = probeRabbitMQ
	ProbePostgres = probePostgres
	ProbeRedis    = probeRedis
	ProbeNATS     = probeNATS
	ProbeMariaDB  = probeMariaDB
	MySQLAddr     = mysqlAddr
	RedactDSN     = redactDSN
)

// SetProbeTimeout sets the deadline of every probe until the test ends, so
// that a server that never answers fails the test quickly.
func SetProbeTimeout(cleanup func(func()), d time.Duration) {
	old := probeTimeout
	probeTimeout = d
	cleanup(func() { probeTimeout = old })
}
