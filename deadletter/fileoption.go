package deadletter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"time"

	"github.com/jonboulle/clockwork"
)

// A FileOption changes how [OpenFile] opens and writes a dead-letter file.
type FileOption func(*fileConfig)

type fileConfig struct {
	// encode is WithEncoder's encoder; nil, the default JSON, which
	// EncodeItem also checks for items it would not give back as they are.
	encode      func(any) ([]byte, error)
	encodeSet   bool
	groupCommit time.Duration // 0: fsync on every write
	clock       clockwork.Clock
	maxBytes    int64 // 0: never rotate
	perm        fs.FileMode
}

func defaultFileConfig() fileConfig {
	return fileConfig{
		clock: clockwork.NewRealClock(),
		perm:  0o600,
	}
}

func (c fileConfig) validate() error {
	switch {
	case c.encodeSet && c.encode == nil:
		return fmt.Errorf("WithEncoder: nil encoder")
	case c.groupCommit < 0:
		return fmt.Errorf("WithGroupCommit: interval %s is negative", c.groupCommit)
	case c.clock == nil:
		return fmt.Errorf("WithClock: nil clock")
	case c.maxBytes < 0:
		return fmt.Errorf("WithMaxBytes: %d is negative", c.maxBytes)
	}
	return nil
}

// WithEncoder sets the function that encodes [Envelope.Item]; the default
// encodes it as [json.Marshal] does, without escaping <, > and &. The encoder must return one JSON value (an item that
// is not JSON-friendly can be returned as a JSON string, base64 for
// bytes). When it returns an error, returns something that is not JSON or
// panics, the envelope is still written: with a null item,
// [Envelope.ItemError] and [Envelope.ItemText]. The default encoder also
// refuses, that way, an item it would not give back as it is
// ([ErrLossy]); an encoder of your own is trusted with what it keeps.
func WithEncoder(encode func(item any) ([]byte, error)) FileOption {
	return func(c *fileConfig) { c.encode, c.encodeSet = encode, true }
}

// WithGroupCommit makes writers share fsyncs: a Write puts its line in the
// file, then waits until a sync of the file, which runs at most interval
// after the first write that is not yet synced. Many concurrent writers
// then cost one fsync per interval instead of one each, at the price of up
// to interval of extra latency per Write. An interval of 0 is the default,
// one fsync per Write.
//
// Group commit runs one goroutine per file, from [OpenFile] to
// [File.Close].
func WithGroupCommit(interval time.Duration) FileOption {
	return func(c *fileConfig) { c.groupCommit = interval }
}

// WithClock sets the clock that times group commits; the default is the
// real clock. Tests give a [clockwork.FakeClock].
func WithClock(clock clockwork.Clock) FileOption {
	return func(c *fileConfig) { c.clock = clock }
}

// WithMaxBytes makes the file rotate when a line would take it past n
// bytes: the full file is renamed to PATH.000001 (then PATH.000002, and
// so on) and a new, empty PATH is created. A line longer than n still goes
// into a file of its own. Rotated files are never deleted. 0, the default,
// never rotates.
func WithMaxBytes(n int64) FileOption {
	return func(c *fileConfig) { c.maxBytes = n }
}

// WithPerm sets the permission bits of files the sink creates; the default
// is 0600, because dead letters carry the data of failed items.
func WithPerm(perm fs.FileMode) FileOption {
	return func(c *fileConfig) { c.perm = perm }
}

// encodeJSON is json.Marshal without HTML escaping: items are data, and
// people read them in the file.
func encodeJSON(item any) ([]byte, error) {
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	if err := e.Encode(item); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}
