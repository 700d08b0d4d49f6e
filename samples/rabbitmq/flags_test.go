package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestBadFlagsNameTheFlag: a bad flag value is refused by validate, as
// main's other flag errors are (exit 2), naming the flag. -max-retry,
// -delays and -hand-off reached the connector, whose error named its config
// fields (Retry.MaxRetry, Retry.Delays[1], Retry.HandOffAfter) instead, and
// main exited 1.
func TestBadFlagsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		flag string
		mod  func(*config)
	}{
		{"-max-retry", func(c *config) { c.maxRetry = 0 }},
		{"-max-retry", func(c *config) { c.maxRetry = 101 }},
		{"-delays", func(c *config) { c.delays = []time.Duration{time.Second, 500 * time.Millisecond} }},
		{"-delays", func(c *config) { c.delays = []time.Duration{1500 * time.Microsecond} }},
		{"-delays", func(c *config) { c.delays = nil }},
		{"-hand-off", func(c *config) { c.handOff = 5 * time.Second }},
		{"-hand-off", func(c *config) { c.handOff = -time.Second }},
		{"-queue", func(c *config) { c.queue = "" }},
	} {
		var out bytes.Buffer
		cfg := smallCfg("amqp://guest:guest@127.0.0.1:1/", "sluice-test.flags", &out)
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
