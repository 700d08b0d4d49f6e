package progress_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/progress"
	"github.com/sluicehq/sluice/resilience"
)

// TestTTYNodeNamesCannotBreakTheRedraw checks that a node name is drawn
// escaped. On a terminal the Reporter redraws its region in place, moving
// the cursor up by the lines it drew: a new line in a name (which Build
// accepts, and Graph escapes) must not add a line the next frame does not
// move up over, or the display would scroll down a line per frame, leaving
// copies behind; nor may a control sequence in a name reach the terminal.
func TestTTYNodeNamesCannotBreakTheRedraw(t *testing.T) {
	h := newHarness(t, progress.WithTTY(true), progress.WithInterval(time.Second), progress.WithWindow(5*time.Second))
	r := newReader(source("read\nfile"), sink("store\x1b[2J"))
	require.NoError(t, h.rep.UseStats(r))
	r.startRun("run-1")
	h.start()
	h.tick()
	h.tick()
	frames := h.out.take()
	require.Len(t, frames, 2)
	up := regexp.MustCompile(`^\x1b\[(\d+)A`).FindStringSubmatch(frames[1])
	require.NotNil(t, up, "the second frame moves the cursor up: %q", frames[1])
	assert.Equal(t, up[1], fmt.Sprint(strings.Count(frames[0], "\n")),
		"the second frame moves up over exactly the lines of the first: %q", frames[0])
	assert.Contains(t, frames[0], `  read\nfile  `, "a new line is drawn as \\n")
	assert.Contains(t, frames[0], `  store\x1b[2J  `, "an escape is drawn as \\x1b")
	assert.NotContains(t, frames[0], "\x1b[2J", "no escape sequence of a name reaches the terminal")
}

// TestLineNodeNamesAreEscaped checks that the compact line of an output
// that is not a terminal escapes names too: a new line in a name would
// split the line in two.
func TestLineNodeNamesAreEscaped(t *testing.T) {
	h := newHarness(t, progress.WithTTY(false), progress.WithInterval(time.Second))
	work := observer.NodeStats{Node: "en\trich", Kind: observer.KindTransform, Circuit: resilience.CircuitHalfOpen}
	r := newReader(source("read\nfile"), work, sink("store"))
	require.NoError(t, h.rep.UseStats(r))
	r.startRun("run-1")
	h.start()
	h.tick()
	w := h.out.take()
	require.Len(t, w, 1)
	assert.Equal(t, 1, strings.Count(w[0], "\n"), "one line: %q", w[0])
	assert.Contains(t, w[0], `read\nfile 0 `)
	assert.Contains(t, w[0], `breaker en\trich half-open`)
}

// TestCutCountsRunes checks how a terminal's lines are cut to its width:
// by characters (runes), not bytes, so that a line of accented or other
// multi-byte characters is neither cut short nor cut inside a character.
func TestCutCountsRunes(t *testing.T) {
	for _, tc := range []struct {
		in    string
		width int
		want  string
	}{
		{"orders  1.0s", 0, "orders  1.0s"},
		{"orders  1.0s", 6, "orders"},
		{"orders  1.0s", 40, "orders  1.0s"},
		{"commandes réglées", 14, "commandes régl"},
		{"注文  1.0s", 3, "注文 "},
		{"ab", 2, "ab"},
	} {
		got := progress.Cut(tc.in, tc.width)
		assert.Equal(t, tc.want, got, "cut(%q, %d)", tc.in, tc.width)
		assert.True(t, utf8.ValidString(got), "cut(%q, %d) = %q", tc.in, tc.width, got)
	}
}

// TestHalfOpenBreakerAsDocumented checks that a half-open breaker reads
// "breaker half-open", as docs/progress.md lists it beside "breaker open",
// rather than the state's String, "half_open".
func TestHalfOpenBreakerAsDocumented(t *testing.T) {
	h := newHarness(t, progress.WithTTY(true), progress.WithInterval(time.Second))
	work := observer.NodeStats{Node: "enrich", Kind: observer.KindTransform, Circuit: resilience.CircuitHalfOpen}
	r := newReader(source("read"), work, sink("store"))
	require.NoError(t, h.rep.UseStats(r))
	r.startRun("run-1")
	h.start()
	h.tick()
	frames := h.out.take()
	require.Len(t, frames, 1)
	assert.Contains(t, frames[0], "breaker half-open", "as docs/progress.md shows it")
}
