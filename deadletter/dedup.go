package deadletter

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"unicode/utf8"
)

// A heldKey names the envelope of one item dead-lettered at one source
// position: 128 bits of a SHA-256 of the envelope's pipeline, source,
// position, origin node and encoded item. The file sink keeps these, not
// the lines, for every envelope it holds that has a position.
type heldKey [16]byte

// keyOf returns the key of an envelope with these fields, and false when
// the envelope has no position: such an envelope is never deduplicated.
// The item is its encoding as it stands in the file; an item that could
// not be encoded counts by its type, encoder error and text, which is all
// the file keeps of it. The strings count as the file holds them (see
// jsonText), so that an envelope written and the one read back have one
// key.
func keyOf(pipeline, source string, position []byte, origin, itemType string, item []byte, itemError, itemText string) (heldKey, bool) {
	if len(position) == 0 {
		return heldKey{}, false
	}
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, field := range [][]byte{jsonText(pipeline), jsonText(source), position, jsonText(origin),
		jsonText(itemType), item, jsonText(itemError), jsonText(itemText)} {
		// Each field with its length, so that no two lists of fields hash
		// the same bytes.
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(field)))])
		h.Write(field)
	}
	var key heldKey
	copy(key[:], h.Sum(nil))
	return key, true
}

// jsonText returns s as encoding/json writes it in a JSON string and reads
// it back: each byte that is not part of valid UTF-8 becomes U+FFFD.
func jsonText(s string) []byte {
	if utf8.ValidString(s) {
		return []byte(s)
	}
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = utf8.AppendRune(b, utf8.RuneError)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return b
}

// envelopeKey is keyOf for an envelope read from a file.
func envelopeKey(env Envelope) (heldKey, bool) {
	raw, _ := env.Item.(json.RawMessage)
	return keyOf(env.Pipeline, env.Source, env.Position, env.OriginNode, env.ItemType, raw, env.ItemError, env.ItemText)
}

// loadHeld returns the keys of the envelopes with a position in the files
// that rotation produced from path and in live, the open file at path
// whose first size bytes are whole lines: every envelope that [ReadAll]
// reads. A torn or corrupt line is no envelope and holds no key. A file
// that cannot be read is an error: going on without its keys would write
// its envelopes again.
func loadHeld(path string, live *os.File, size int64) (map[heldKey]struct{}, error) {
	held := map[heldKey]struct{}{}
	var failed error
	add := func(r Record, err error) bool {
		if err != nil {
			var le *LineError
			if errors.As(err, &le) {
				return true // not an envelope: a replay writes it again
			}
			failed = err
			return false
		}
		if key, ok := envelopeKey(r.Envelope); ok {
			held[key] = struct{}{}
		}
		return true
	}
	rotated, err := Rotated(path)
	if err != nil {
		return nil, err
	}
	for _, p := range rotated {
		for r, err := range ReadRecords(p) {
			if !add(r, err) {
				break
			}
		}
		if failed != nil {
			return nil, fmt.Errorf("deadletter: open %s: read the envelopes it holds: %w", path, failed)
		}
	}
	readRecords(path, io.NewSectionReader(live, 0, size), add)
	if failed != nil {
		return nil, fmt.Errorf("deadletter: open %s: read the envelopes it holds: %w", path, failed)
	}
	return held, nil
}
