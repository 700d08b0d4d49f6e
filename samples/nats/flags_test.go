package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestBadFlagsNameTheFlag: a bad flag value is refused by validate, as
// main's other flag errors are (exit 2), naming the flag. -hand-off and
// -stream reached the connector, whose error named its config fields
// (Retry.HandOffAfter, Stream) instead, and main exited 1.
func TestBadFlagsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		flag string
		mod  func(*config)
	}{
		{"-hand-off", func(c *config) { c.handOff = -time.Second }},
		{"-stream", func(c *config) { c.stream = "bad.name" }},
		{"-stream", func(c *config) { c.stream = "" }},
		{"-max-deliver", func(c *config) { c.maxDeliver, c.backoff = 0, nil }},
	} {
		var out bytes.Buffer
		cfg := smallCfg("nats://127.0.0.1:1", "SLUICE_TEST_FLAGS", &out)
		tc.mod(&cfg)
		err := cfg.validate()
		if assert.ErrorIs(t, err, errConfig, tc.flag) {
			assert.Contains(t, err.Error(), tc.flag, "the error names the flag")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = run(ctx, cfg)
		cancel()
		assert.ErrorIs(t, err, errConfig, "run refuses %s before connecting", tc.flag)
	}
}

// TestBackoffThatDoesNotRiseIsRefused: the help of -backoff says its waits
// rise, but 1s,500ms was accepted (and the server took it).
func TestBackoffThatDoesNotRiseIsRefused(t *testing.T) {
	for _, backoff := range [][]time.Duration{
		{time.Second, 500 * time.Millisecond},
		{time.Second, time.Second},
	} {
		var out bytes.Buffer
		cfg := smallCfg("nats://127.0.0.1:1", "SLUICE_TEST_FLAGS", &out)
		cfg.backoff = backoff
		err := cfg.validate()
		if assert.ErrorIs(t, err, errConfig, "%v", backoff) {
			assert.Contains(t, err.Error(), "-backoff")
		}
	}
}
