package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/servicetest"
)

// TestPoisonDuplicateIsDeadLetteredOnce: every message a poison one, one of
// the three published twice. The sample says duplicates are skipped, but
// the dead-letter path had no guard: the twice-published message was
// dead-lettered twice and counted twice. Now the dead-letter path skips a
// MessageId it already dead-lettered, and counts it as a duplicate.
func TestPoisonDuplicateIsDeadLetteredOnce(t *testing.T) {
	url := servicetest.RabbitMQ(t)
	var out bytes.Buffer
	cfg := smallCfg(url, randomQueue("poison"), &out)
	cfg.poison = 1
	cfg.n = 3
	cfg.dup = 2
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := run(ctx, cfg)
	require.NoError(t, err)
	s.print(&out)
	assert.Equal(t, 4, s.published)
	assert.Equal(t, 0, s.delivered)
	assert.Equal(t, 3, s.deadLettered, "3 messages, one of them published twice:\n%s", out.String())
	assert.Equal(t, 1, s.duplicates, "the second copy of msg-1")
}
