package sql

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"time"
)

// A position is the key of a row: the values of its ordering columns
// (the watermark, then the key), as the driver gave them, so that a page
// that starts after it passes them back as arguments.
//
// Encoded, it is a version byte, the query's fingerprint (8 bytes: see
// fingerprint), the number of values, and each value as a type byte and
// its bytes. The encoding is the package's own: callers
// keep the bytes as given (node.Emitter's EmitAt), never read them.
type position []any

const positionVersion = 2

// The type bytes of a position's values.
const (
	posInt    = 'i' // int64, zig-zag varint
	posUint   = 'u' // uint64, varint
	posFloat  = 'f' // float64, 8 bytes
	posString = 's' // string, length and bytes
	posBytes  = 'b' // []byte, length and bytes
	posTime   = 't' // time.Time, length and MarshalBinary's bytes
	posBool   = 'B' // bool, one byte
)

// errMalformed says why position bytes do not decode.
var errMalformed = errors.New("malformed bytes")

// appendValue appends v to b, or says which types a position holds.
func appendValue(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case int64:
		return binary.AppendVarint(append(b, posInt), v), nil
	case int:
		return binary.AppendVarint(append(b, posInt), int64(v)), nil
	case int32:
		return binary.AppendVarint(append(b, posInt), int64(v)), nil
	case float32:
		// go-sql-driver/mysql gives a FLOAT column as a float32: as a
		// float64 it is the same number, which compares equal to the
		// column's value.
		return binary.BigEndian.AppendUint64(append(b, posFloat), math.Float64bits(float64(v))), nil
	case uint64:
		return binary.AppendUvarint(append(b, posUint), v), nil
	case float64:
		return binary.BigEndian.AppendUint64(append(b, posFloat), math.Float64bits(v)), nil
	case string:
		return append(binary.AppendUvarint(append(b, posString), uint64(len(v))), v...), nil
	case []byte:
		return append(binary.AppendUvarint(append(b, posBytes), uint64(len(v))), v...), nil
	case time.Time:
		t, err := v.MarshalBinary()
		if err != nil {
			return nil, err
		}
		return append(binary.AppendUvarint(append(b, posTime), uint64(len(t))), t...), nil
	case bool:
		var x byte
		if v {
			x = 1
		}
		return append(b, posBool, x), nil
	case nil:
		return nil, errors.New("it is NULL: key and watermark columns must be NOT NULL")
	default:
		return nil, fmt.Errorf("the driver gave a %T; a position holds integers, floats, strings, []byte, times and booleans", v)
	}
}

// fingerprint returns the fingerprint of a query's positions: a hash of
// what makes a position mean a row, the table or From, the watermark and
// the key columns (not Where, Columns nor PageSize, which a program may
// change between runs).
func fingerprint(o QueryOptions) uint64 {
	h := fnv.New64a()
	for _, s := range append([]string{o.Table, o.From, o.Watermark}, o.Key...) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// errOtherQuery says that position bytes are those of another query.
var errOtherQuery = errors.New("it is the position of another query (another table, From, key or watermark)")

// appendHeader appends the version, the fingerprint fp and the number of
// values n of a position to b.
func appendHeader(b []byte, fp uint64, n int) []byte {
	b = binary.BigEndian.AppendUint64(append(b, positionVersion), fp)
	return binary.AppendUvarint(b, uint64(n))
}

// decodePosition reads a position encoded by encode, of the query whose
// fingerprint is fp, with want values; nil is the start of the table.
func decodePosition(b []byte, fp uint64, want int) (position, error) {
	if b == nil {
		return nil, nil
	}
	if len(b) < 9 || b[0] != positionVersion {
		return nil, errMalformed
	}
	if binary.BigEndian.Uint64(b[1:]) != fp {
		return nil, errOtherQuery
	}
	b = b[9:]
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, errMalformed
	}
	if n != uint64(want) {
		return nil, fmt.Errorf("it holds %d values, the query orders by %d columns", n, want)
	}
	b = b[k:]
	p := make(position, 0, want)
	for range want {
		if len(b) == 0 {
			return nil, errMalformed
		}
		typ := b[0]
		b = b[1:]
		switch typ {
		case posInt:
			v, k := binary.Varint(b)
			if k <= 0 {
				return nil, errMalformed
			}
			p, b = append(p, v), b[k:]
		case posUint:
			v, k := binary.Uvarint(b)
			if k <= 0 {
				return nil, errMalformed
			}
			p, b = append(p, v), b[k:]
		case posFloat:
			if len(b) < 8 {
				return nil, errMalformed
			}
			p, b = append(p, math.Float64frombits(binary.BigEndian.Uint64(b))), b[8:]
		case posBool:
			if len(b) < 1 || b[0] > 1 {
				return nil, errMalformed
			}
			p, b = append(p, b[0] == 1), b[1:]
		case posString, posBytes, posTime:
			l, k := binary.Uvarint(b)
			if k <= 0 || l > uint64(len(b)-k) {
				return nil, errMalformed
			}
			raw := b[k : k+int(l)]
			b = b[k+int(l):]
			switch typ {
			case posString:
				p = append(p, string(raw))
			case posBytes:
				p = append(p, append([]byte{}, raw...))
			default:
				var t time.Time
				if err := t.UnmarshalBinary(raw); err != nil {
					return nil, errMalformed
				}
				p = append(p, t)
			}
		default:
			return nil, errMalformed
		}
	}
	if len(b) != 0 {
		return nil, errMalformed
	}
	return p, nil
}

// appendTo appends p's bytes to b; for a value a position cannot hold,
// it returns the value's index and why.
func (p position) appendTo(b []byte, fp uint64) ([]byte, int, error) {
	b = appendHeader(b, fp, len(p))
	for i, v := range p {
		var err error
		if b, err = appendValue(b, v); err != nil {
			return nil, i, err
		}
	}
	return b, 0, nil
}
