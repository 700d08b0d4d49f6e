package broker

import (
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/resilience"
)

// Bounds of the history a message carries in a header from one delivery
// to the next, so that its headers stay small however often it failed and
// however long its errors (a RabbitMQ header frame must fit the
// connection's frame size, 128 KiB by default): at most MaxHistory
// entries, each error's text cut to MaxErrText bytes, and at most
// MaxHistoryJSON bytes in all, oldest entries dropped first.
const (
	MaxHistory     = 32
	MaxErrText     = 256
	MaxHistoryJSON = 16 << 10
)

// carriedAttempt is one entry of a carried history, as JSON.
type carriedAttempt struct {
	Time  time.Time     `json:"time"`
	Layer string        `json:"layer"`
	Retry int           `json:"retry"`
	Delay time.Duration `json:"delay,omitempty"`
	Err   string        `json:"error"`
	Node  string        `json:"node,omitempty"`
}

// EncodeHistory returns the newest entries of hist within the bounds, as
// the JSON text of a header; DecodeHistory reads it back.
func EncodeHistory(hist []deadletter.Attempt) string {
	if len(hist) > MaxHistory {
		hist = hist[len(hist)-MaxHistory:]
	}
	as := make([]carriedAttempt, len(hist))
	for i, a := range hist {
		layer, _ := a.Layer.MarshalText()
		as[i] = carriedAttempt{Time: a.Time.UTC(), Layer: string(layer), Retry: a.Retry, Delay: a.Delay, Err: Cut(a.Err, MaxErrText), Node: a.Node}
	}
	for len(as) > 0 {
		b, err := json.Marshal(as)
		if err == nil && len(b) <= MaxHistoryJSON {
			return string(b)
		}
		as = as[1:]
	}
	return "[]"
}

// DecodeHistory reads a history that EncodeHistory wrote: nil for text
// that is not one, and an entry whose layer it does not know left out.
func DecodeHistory(text string) []deadletter.Attempt {
	var as []carriedAttempt
	if json.Unmarshal([]byte(text), &as) != nil {
		return nil
	}
	var hist []deadletter.Attempt
	for _, a := range as {
		var k resilience.RetryKind
		if k.UnmarshalText([]byte(a.Layer)) != nil {
			continue
		}
		hist = append(hist, deadletter.Attempt{Time: a.Time, Layer: k, Retry: a.Retry, Delay: a.Delay, Err: a.Err, Node: a.Node})
	}
	return hist
}

// Cut shortens s to at most n bytes, at a rune boundary, marking the cut.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n - len("…")
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
