package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTourPrintsEachCurveAndJitter(t *testing.T) {
	var out bytes.Buffer
	tour(&out, 6, 5000, 3)
	text := out.String()

	row := func(prefix string) []string {
		for line := range strings.SplitSeq(text, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), prefix) {
				return strings.Fields(line)
			}
		}
		t.Fatalf("no row %q in:\n%s", prefix, text)
		return nil
	}
	assert.Equal(t, []string{"Exponential(100ms).WithMaxDelay(2s)", "full", "100ms", "200ms", "400ms", "800ms", "1.6s", "2s", "5.1s"},
		row("Exponential(100ms).WithMaxDelay(2s)"))
	assert.Equal(t, []string{"Linear(250ms)", "equal", "250ms", "500ms", "750ms", "1s", "1.25s", "1.5s", "5.25s"}, row("Linear(250ms)"))
	assert.Equal(t, []string{"Custom(fibonacci", "×", "100ms)", "never", "100ms", "100ms", "200ms", "300ms", "500ms", "800ms", "2s"},
		row("Custom(fibonacci"))

	// Each histogram's bins add up to the samples drawn.
	bins := regexp.MustCompile(`(?m)^\s+\S+–\S+\s+(\d+)`).FindAllStringSubmatch(text, -1)
	require.Len(t, bins, 30)
	for h := range 3 {
		sum := 0
		for _, m := range bins[h*10 : h*10+10] {
			n, err := strconv.Atoi(m[1])
			require.NoError(t, err)
			sum += n
		}
		assert.Equal(t, 5000, sum, "histogram %d", h)
	}

	// The same seed prints the same tour.
	var again bytes.Buffer
	tour(&again, 6, 5000, 3)
	assert.Equal(t, text, again.String())
}
