package deadletter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/sluicehq/sluice/node"
)

// A SourceOption changes how [Source] reads a dead-letter file.
type SourceOption func(*sourceConfig)

type sourceConfig struct {
	decode    func(data []byte, v any) error
	skip      func(*LineError)
	rotated   bool
	sourceErr error
}

// WithDecoder sets the function that decodes an envelope's item into the
// source's item type; the default is [json.Unmarshal]. Give the
// counterpart of the encoder given to [OpenFile] with [WithEncoder].
func WithDecoder(decode func(data []byte, v any) error) SourceOption {
	return func(c *sourceConfig) { c.decode = decode }
}

// SkipBadLines makes the source skip every line it cannot turn into an
// item, a torn or corrupt line or an item that does not decode, after
// passing its [*LineError] to report; by default Run stops at the first
// with that error. Report is called from the goroutine that runs the
// source. SkipBadLines panics if report is nil: skipping dead letters
// without a word would lose them silently.
func SkipBadLines(report func(*LineError)) SourceOption {
	if report == nil {
		panic("sluice: deadletter.SkipBadLines: nil report function")
	}
	return func(c *sourceConfig) { c.skip = report }
}

// IncludeRotated makes the source read the files rotated away from its path
// first, oldest first, as [ReadAll] does.
func IncludeRotated() SourceOption {
	return func(c *sourceConfig) { c.rotated = true }
}

// Source returns a [node.Source] that re-drives the dead letters of the
// file at path: it decodes the item of every envelope, in order, into a T
// and emits it. Errors of the file and items that do not decode into T
// stop Run with a [*LineError] that names the line, unless
// [SkipBadLines] is given; an error of Emit stops Run with that error.
//
// Run reads the file from the start each time it is called: a node
// restarted by the engine emits again what it emitted before, so the
// nodes that handle re-driven items must be idempotent.
func Source[T any](path string, opts ...SourceOption) node.Source[T] {
	cfg := sourceConfig{decode: json.Unmarshal}
	for _, opt := range opts {
		opt(&cfg)
	}
	if cfg.decode == nil {
		cfg.sourceErr = fmt.Errorf("deadletter: source %s: WithDecoder: nil decoder", path)
	}
	return node.SourceFunc[T](func(ctx context.Context, out node.Emitter[T]) error {
		if cfg.sourceErr != nil {
			return cfg.sourceErr
		}
		records := ReadRecords(path)
		if cfg.rotated {
			records = readAllRecords(path)
		}
		for r, err := range records {
			if err == nil {
				var item T
				item, err = decodeItem[T](r, cfg.decode)
				if err == nil {
					if err := out.Emit(ctx, item); err != nil {
						return err
					}
					continue
				}
			}
			var le *LineError
			if errors.As(err, &le) && cfg.skip != nil {
				cfg.skip(le)
				continue
			}
			return err
		}
		return nil
	})
}

func decodeItem[T any](r Record, decode func([]byte, any) error) (T, error) {
	var item T
	fail := func(err error) (T, error) {
		return item, &LineError{Path: r.Path, Line: r.Line, Offset: r.Offset, Kind: ErrUndecodableItem, Err: err}
	}
	if r.ItemError != "" {
		return fail(fmt.Errorf("the item was not encoded when it was dead-lettered: %s", r.ItemError))
	}
	raw, _ := r.Item.(json.RawMessage)
	if err := decode(raw, &item); err != nil {
		return fail(fmt.Errorf("into %s: %w", reflect.TypeFor[T](), err))
	}
	return item, nil
}
