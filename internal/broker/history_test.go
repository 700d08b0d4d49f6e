package broker_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/resilience"
)

// A history read back is the one written, its times in UTC.
func TestHistoryRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	hist := []deadletter.Attempt{
		{Time: at, Layer: resilience.ItemRetry, Retry: 0, Err: "boom", Node: "price"},
		{Time: at.Add(time.Second), Layer: resilience.NodeRestart, Retry: 1, Delay: time.Second, Err: "boom again"},
	}
	got := broker.DecodeHistory(broker.EncodeHistory(hist))
	require.Len(t, got, 2)
	for i := range hist {
		assert.True(t, hist[i].Time.Equal(got[i].Time))
		assert.Equal(t, time.UTC, got[i].Time.Location())
		got[i].Time = hist[i].Time
	}
	assert.Equal(t, hist, got)
}

// The newest MaxHistory entries are kept, each error cut at a rune
// boundary, and the whole within MaxHistoryJSON bytes.
func TestHistoryBounds(t *testing.T) {
	t.Parallel()
	var hist []deadletter.Attempt
	for i := range broker.MaxHistory + 5 {
		hist = append(hist, deadletter.Attempt{Layer: resilience.ItemRetry, Retry: i, Err: strings.Repeat("é", 1000)})
	}
	text := broker.EncodeHistory(hist)
	assert.LessOrEqual(t, len(text), broker.MaxHistoryJSON)
	got := broker.DecodeHistory(text)
	require.NotEmpty(t, got)
	assert.LessOrEqual(t, len(got), broker.MaxHistory)
	assert.Equal(t, broker.MaxHistory+4, got[len(got)-1].Retry, "the newest entry stays")
	for _, a := range got {
		assert.LessOrEqual(t, len(a.Err), broker.MaxErrText)
		assert.True(t, utf8.ValidString(a.Err))
		assert.True(t, strings.HasSuffix(a.Err, "…"))
	}
}

// Text that is no history gives none; an entry of an unknown layer is
// left out.
func TestDecodeHistoryOfOtherText(t *testing.T) {
	t.Parallel()
	assert.Nil(t, broker.DecodeHistory("not json"))
	assert.Nil(t, broker.DecodeHistory(""))
	got := broker.DecodeHistory(`[{"time":"2026-01-02T03:04:05Z","layer":"warp","retry":1,"error":"x"},{"time":"2026-01-02T03:04:05Z","layer":"item_retry","retry":2,"error":"y"}]`)
	require.Len(t, got, 1)
	assert.Equal(t, 2, got[0].Retry)
}

// Cut leaves a short text alone.
func TestCutShort(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "abc", broker.Cut("abc", 3))
	assert.Equal(t, "ab…", broker.Cut("abcdefgh", 5))
}
