package pipeline

import (
	"fmt"
	"time"
)

// DecodeSavedPosition returns the source's position in what a checkpoint
// store holds for it, and the windows saved with it as "node key start"
// (start in Unix nanoseconds), sorted; the tests of the window log read
// checkpoints with it.
func DecodeSavedPosition(saved []byte) (pos []byte, windows []string, err error) {
	pos, wins, _, err := decodePosition(saved)
	if err != nil {
		return nil, nil, err
	}
	for node, ws := range wins {
		for _, w := range ws {
			windows = append(windows, fmt.Sprintf("%s %s %d", node, w.Key, w.Start))
		}
	}
	return pos, windows, nil
}

// EncodeSavedPosition returns the position envelope of pos with the
// windows of node: each is a JSON key and a window [start, start+size).
func EncodeSavedPosition(pos []byte, node string, size time.Duration, keys []string, starts []time.Time) ([]byte, error) {
	ws := make([]loggedWindow, len(keys))
	for i, k := range keys {
		ws[i] = loggedWindow{Key: []byte(k), Start: starts[i].UnixNano(), End: starts[i].Add(size).UnixNano()}
	}
	return encodePosition(pos, map[string][]loggedWindow{node: ws}, nil)
}

// SavedWatermarks returns the watermarks saved with a position, by node.
func SavedWatermarks(saved []byte) (map[string]time.Time, error) {
	_, _, wms, err := decodePosition(saved)
	return wms, err
}

// EncodeSavedPositionAt is EncodeSavedPosition with the watermarks wms,
// by node.
func EncodeSavedPositionAt(pos []byte, node string, size time.Duration, keys []string, starts []time.Time, wms map[string]time.Time) ([]byte, error) {
	ws := make([]loggedWindow, len(keys))
	for i, k := range keys {
		ws[i] = loggedWindow{Key: []byte(k), Start: starts[i].UnixNano(), End: starts[i].Add(size).UnixNano()}
	}
	return encodePosition(pos, map[string][]loggedWindow{node: ws}, wms)
}
