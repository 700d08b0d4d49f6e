package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProgressOnNonTerminal checks the progress an output that is not a
// terminal gets: a line every 2 s at most, even when -progress asks for
// more, with the recent rate beside the average, and a final line.
func TestProgressOnNonTerminal(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.rows = 1000
	cfg.progress = 200 * time.Millisecond
	var out bytes.Buffer
	s := runOnFakeClockWith(t, cfg, &out, nil, nil)
	assert.NotContains(t, out.String(), "\x1b", "no terminal codes")

	// The progress lines follow the lines that say which file the job
	// wrote and where it starts.
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	require.GreaterOrEqual(t, len(lines), 2)
	assert.Equal(t, "etl: starting at the first row of 1000 (no checkpoint yet)", lines[1])
	lines = lines[2:]
	require.GreaterOrEqual(t, len(lines), 2, "the outage makes the run last seconds")
	line := regexp.MustCompile(`^[\dms.]+  read \d+/1000 \([\d.kM]+/s, avg [\d.kM]+/s\)  validate \d+ \([\d.kM]+/s, avg [\d.kM]+/s\)`)
	for _, l := range lines {
		assert.Regexp(t, line, l)
	}
	// The clock is fake, and it moves on while the reporter draws: the
	// times printed are not exactly 2 s apart, but the count is right.
	assert.LessOrEqual(t, len(lines)-1, int(s.elapsed/(2*time.Second)), "a line every 2 s, then the final one")
	final := lines[len(lines)-1]
	assert.Contains(t, final, "read 1000/1000 ")
	assert.Contains(t, final, "validate "+strconv.FormatInt(s.node("validate").Out, 10)+" ")
	assert.True(t, strings.HasSuffix(final, "  done"), final)
}

// The summary lists every file the run writes: the database, the dead
// letters and the picture of the pipeline, pipeline.mmd, beside the
// database.
func TestSummaryListsEveryOutput(t *testing.T) {
	t.Parallel()
	s := summary{cfg: config{db: "out/orders.db", dlq: "out/dead-letters.jsonl"}}
	var b bytes.Buffer
	s.print(&b)
	out := b.String()
	outputs := out[strings.Index(out, "\nOutputs\n"):]
	for _, f := range []string{"out/orders.db", "out/dead-letters.jsonl", "out/pipeline.mmd"} {
		assert.Contains(t, outputs, f)
	}
	assert.Regexp(t, `\n  graph +out/pipeline\.mmd `, outputs)
}
