package file

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A position is the point just after an item: how many bytes of the
// (decompressed) input and how many lines come before the next item, for
// CSV the number of fields the reader expects per record, so that a
// resumed reader checks records as the first run did, and how the line
// before it ended: with "\n", or at the end of the file without a line end,
// which a writer may append later.
//
// Encoded, it is a version byte and four unsigned varints (version 2), or
// three, without the line end (version 1, which earlier versions of the
// package wrote, and which still decode). The encoding is the package's
// own: callers keep the bytes as given (node.Emitter's EmitAt), never read
// them.
type position struct {
	off    int64   // bytes of input before the next item
	line   int64   // lines before the next item
	fields int64   // CSV: fields per record expected, 0 for none
	end    lineEnd // how the line before the position ended
}

// A lineEnd is how the line before a position ended.
type lineEnd uint8

const (
	// endNewline: with "\n" (or "\r\n"); also the start of the file.
	endNewline lineEnd = iota
	// endNone: the line was the file's last and had no end. The bytes a
	// writer appends after it may end it.
	endNone
	// endUnknown: a version 1 position, which did not say. A byte other
	// than "\n" before it is taken as endNone. Never encoded.
	endUnknown
	// endOpen: the file's last CSV record, without its end, with a quote
	// that may still be open (an odd number of quotes): whatever a writer
	// appends may continue its field, "\n" too.
	endOpen
)

const (
	positionVersion1 = 1 // off, line, fields
	positionVersion  = 2 // off, line, fields, end
)

// maxPositionLen is the longest encoded position.
const maxPositionLen = 1 + 4*binary.MaxVarintLen64

// encode returns p as a new slice: the pipeline keeps it.
func (p position) encode() []byte {
	return p.appendTo(make([]byte, 0, maxPositionLen))
}

func (p position) appendTo(b []byte) []byte {
	b = append(b, positionVersion)
	b = binary.AppendUvarint(b, uint64(p.off))
	b = binary.AppendUvarint(b, uint64(p.line))
	b = binary.AppendUvarint(b, uint64(p.fields))
	return binary.AppendUvarint(b, uint64(p.end))
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

// decodePosition reads a position encoded by encode, or by an earlier
// version of the package (version 1); nil is the start.
func decodePosition(b []byte) (position, error) {
	if b == nil {
		return position{}, nil
	}
	if len(b) == 0 || b[0] != positionVersion && b[0] != positionVersion1 {
		return position{}, errMalformed
	}
	n := 4
	if b[0] == positionVersion1 {
		n = 3
	}
	b = b[1:]
	var v [4]int64
	for i := range n {
		u, k := binary.Uvarint(b)
		if k <= 0 || u > 1<<62 {
			return position{}, errMalformed
		}
		v[i], b = int64(u), b[k:]
	}
	p := position{off: v[0], line: v[1], fields: v[2], end: lineEnd(v[3])}
	if n == 3 {
		p.end = endUnknown
	}
	// Every line before the position holds at least one byte, and a
	// record has at most one field more than it has bytes. A position
	// after a line without its end is after an item.
	if len(b) != 0 || p.line > p.off || p.fields > p.off+1 ||
		n == 4 && (p.end > endOpen || p.end == endUnknown || p.end != endNewline && p.off == 0) {
		return position{}, errMalformed
	}
	return p, nil
}

func (p position) String() string {
	return fmt.Sprintf("byte %d, after line %d", p.off, p.line)
}
