package servicetest

// ForgetProbes makes the next call of each helper probe its service again,
// so that a test can point a helper at a missing service whatever the
// tests before it (or an earlier run under -count) found.
func ForgetProbes() {
	rabbit, postgres, redisServer, natsServer = &probe{}, &probe{}, &probe{}, &probe{}
}
