package file

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A position is the point just after an item: how many bytes of the
// (decompressed) input and how many lines come before the next item, and,
// for CSV, the number of fields the reader expects per record, so that a
// resumed reader checks records as the first run did.
//
// Encoded, it is a version byte and three unsigned varints. The encoding is
// the package's own: callers keep the bytes as given (node.Emitter's
// EmitAt), never read them.
type position struct {
	off    int64 // bytes of input before the next item
	line   int64 // lines before the next item
	fields int64 // CSV: fields per record expected, 0 for none
}

const positionVersion = 1

// encode returns p as a new slice: the pipeline keeps it.
func (p position) encode() []byte {
	b := make([]byte, 0, 1+3*binary.MaxVarintLen64)
	b = append(b, positionVersion)
	b = binary.AppendUvarint(b, uint64(p.off))
	b = binary.AppendUvarint(b, uint64(p.line))
	b = binary.AppendUvarint(b, uint64(p.fields))
	return b
}

// errMalformed says why position bytes do not decode.
var errMalformed = errors.New("malformed bytes")

// decodePosition reads a position encoded by encode; nil is the start.
func decodePosition(b []byte) (position, error) {
	if b == nil {
		return position{}, nil
	}
	if len(b) == 0 || b[0] != positionVersion {
		return position{}, errMalformed
	}
	b = b[1:]
	var v [3]int64
	for i := range v {
		u, n := binary.Uvarint(b)
		if n <= 0 || u > 1<<62 {
			return position{}, errMalformed
		}
		v[i], b = int64(u), b[n:]
	}
	p := position{off: v[0], line: v[1], fields: v[2]}
	// Every line before the position holds at least one byte, and a
	// record has at most one field more than it has bytes.
	if len(b) != 0 || p.line > p.off || p.fields > p.off+1 {
		return position{}, errMalformed
	}
	return p, nil
}

func (p position) String() string {
	return fmt.Sprintf("byte %d, after line %d", p.off, p.line)
}
