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
	b, _, err := p.appendTo(nil, 42)
	if err != nil {
		t.Fatal(err)
	}
	q, err := decodePosition(b, 42, len(p))
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
	if _, bad, err := (position{int64(1), nil}).appendTo(nil, 42); err == nil || bad != 1 {
		t.Errorf("NULL: %d, %v", bad, err)
	}
	if _, bad, err := (position{struct{}{}}).appendTo(nil, 42); err == nil || bad != 0 {
		t.Errorf("a struct: %d, %v", bad, err)
	}
}

// Bytes that decode encode back to themselves; no input panics.
func FuzzPosition(f *testing.F) {
	for _, p := range []position{{int64(1)}, {"a", int64(2)}, {[]byte{1}, time.Unix(1, 2).UTC(), true, 2.5, uint64(3)}} {
		b, _, _ := p.appendTo(nil, 42)
		f.Add(b, len(p))
	}
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		if n < 0 || n > 16 {
			return
		}
		p, err := decodePosition(b, 42, n)
		if err != nil || p == nil {
			return
		}
		again, _, err := p.appendTo(nil, 42)
		if err != nil {
			t.Fatalf("%v decoded from %x does not encode: %v", p, b, err)
		}
		q, err := decodePosition(again, 42, n)
		if err != nil || len(q) != len(p) {
			t.Fatalf("%x re-encoded as %x does not decode: %v", b, again, err)
		}
	})
}

// A position carries its query's fingerprint: another query's is refused;
// a float32 (go-sql-driver/mysql's FLOAT) is kept as the float64 of the
// same number.
func TestPositionFingerprintAndFloat32(t *testing.T) {
	byID := fingerprint(QueryOptions{Table: "orders", Key: []string{"id"}})
	for _, other := range []QueryOptions{
		{Table: "orders", Key: []string{"name"}},
		{Table: "items", Key: []string{"id"}},
		{From: "orders", Key: []string{"id"}},
		{Table: "orders", Key: []string{"id"}, Watermark: "updated_at"},
		{Table: "order", Key: []string{"sid"}},
	} {
		if fingerprint(other) == byID {
			t.Errorf("%+v has the fingerprint of orders by id", other)
		}
	}
	if fingerprint(QueryOptions{Table: "orders", Key: []string{"id"}, Where: "qty > ?", PageSize: 5}) != byID {
		t.Error("Where and PageSize change the fingerprint")
	}
	b, _, err := position{float32(0.1)}.appendTo(nil, byID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodePosition(b, byID+1, 1); err != errOtherQuery {
		t.Errorf("another fingerprint: %v", err)
	}
	p, err := decodePosition(b, byID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if p[0] != float64(float32(0.1)) {
		t.Errorf("float32(0.1) came back as %v (%T)", p[0], p[0])
	}
}
