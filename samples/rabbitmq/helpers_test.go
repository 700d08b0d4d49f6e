package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"time"
)

// smallCfg is a quick run of n = 20 messages that all work.
func smallCfg(url, queue string, out *bytes.Buffer) config {
	return config{url: url, queue: queue, n: 20,
		delays: []time.Duration{50 * time.Millisecond, 150 * time.Millisecond}, handOff: 100 * time.Millisecond,
		maxRetry: 2, publishers: 4, reportWriter: out}
}

// randomQueue names a queue no other test uses.
func randomQueue(prefix string) string {
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	return "sluice-test." + prefix + "." + hex.EncodeToString(suffix[:])
}
