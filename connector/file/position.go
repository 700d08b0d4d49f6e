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

// maxPositionLen is the longest encoded position.
const maxPositionLen = 1 + 3*binary.MaxVarintLen64

// encode returns p as a new slice: the pipeline keeps it.
func (p position) encode() []byte {
	return p.appendTo(make([]byte, 0, maxPositionLen))
}

func (p position) appendTo(b []byte) []byte {
	b = append(b, positionVersion)
	b = binary.AppendUvarint(b, uint64(p.off))
	b = binary.AppendUvarint(b, uint64(p.line))
	return binary.AppendUvarint(b, uint64(p.fields))
}

// A positionBlock hands out encoded positions cut from one block, saving
// an allocation per item: the bytes of a position handed out are never
// written again, as the pipeline keeps them. A block held by one kept
// position is 4 KiB, shared by a few hundred.
type positionBlock struct{ b []byte }

func (pb *positionBlock) encode(p position) []byte {
	if cap(pb.b)-len(pb.b) < maxPositionLen {
		pb.b = make([]byte, 0, 4096)
	}
	start := len(pb.b)
	pb.b = p.appendTo(pb.b)
	return pb.b[start:len(pb.b):len(pb.b)]
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
