package reason_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/reason"
)

// A reason is at most MaxLen bytes, and making one copies no more: a word
// of 32 MB without digits (a token, a blob) was copied whole before the
// cut, for each event and, in the inspector, under its list's lock (found
// by review). The rules themselves are slogobserver.Reason's tests.
func TestOfALongWordCopiesNoMoreThanTheReason(t *testing.T) {
	s := "bad token " + strings.Repeat("a", 32<<20)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := reason.Of(s, "")
	runtime.ReadMemStats(&after)
	assert.Equal(t, reason.MaxLen, len(r))
	assert.True(t, strings.HasPrefix(r, "bad token aaa"), r[:20])
	alloc := after.TotalAlloc - before.TotalAlloc
	assert.Less(t, alloc, uint64(1<<20), "Of allocated %d bytes for a %d-byte text", alloc, len(s))
}
