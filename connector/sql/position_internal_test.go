package sql

import (
	"bytes"
	"math"
	"testing"
	"time"
)

// Every value a position holds comes back as it went in.
func TestPositionRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	p := position{int64(-7), uint64(math.MaxUint64), 1.5, "é日本", []byte{0, 0xff}, at, true, false, int64(math.MinInt64), "", []byte{}}
	b, _, err := p.appendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	q, err := decodePosition(b, len(p))
	if err != nil {
		t.Fatal(err)
	}
	for i := range p {
		switch v := p[i].(type) {
		case time.Time:
			if !v.Equal(q[i].(time.Time)) {
				t.Errorf("value %d: %v, want %v", i, q[i], v)
			}
		case []byte:
			if !bytes.Equal(v, q[i].([]byte)) {
				t.Errorf("value %d: %v, want %v", i, q[i], v)
			}
		default:
			if q[i] != p[i] {
				t.Errorf("value %d: %v (%T), want %v (%T)", i, q[i], q[i], p[i], p[i])
			}
		}
	}
	if _, bad, err := (position{int64(1), nil}).appendTo(nil); err == nil || bad != 1 {
		t.Errorf("NULL: %d, %v", bad, err)
	}
	if _, bad, err := (position{struct{}{}}).appendTo(nil); err == nil || bad != 0 {
		t.Errorf("a struct: %d, %v", bad, err)
	}
}

// Bytes that decode encode back to themselves; no input panics.
func FuzzPosition(f *testing.F) {
	for _, p := range []position{{int64(1)}, {"a", int64(2)}, {[]byte{1}, time.Unix(1, 2).UTC(), true, 2.5, uint64(3)}} {
		b, _, _ := p.appendTo(nil)
		f.Add(b, len(p))
	}
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		if n < 0 || n > 16 {
			return
		}
		p, err := decodePosition(b, n)
		if err != nil || p == nil {
			return
		}
		again, _, err := p.appendTo(nil)
		if err != nil {
			t.Fatalf("%v decoded from %x does not encode: %v", p, b, err)
		}
		q, err := decodePosition(again, n)
		if err != nil || len(q) != len(p) {
			t.Fatalf("%x re-encoded as %x does not decode: %v", b, again, err)
		}
	})
}
