package deadletter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/node"
)

// A SourceOption changes how [Source] reads a dead-letter file.
type SourceOption func(*sourceConfig)

type sourceConfig struct {
	decode    func(data []byte, v any) error
	nodes     map[string]bool // WithDecisionNodes; nil: every node
	skip      func(*LineError)
	rotated   bool
	sourceErr error
}

// WithDecoder sets the function that decodes an envelope's item into the
// source's item type. The default is strict JSON: [json.Unmarshal] that
// also refuses a field T does not have and anything after the item, so
// that an item of another shape is an error, not a zero value. Give the
// counterpart of the encoder given to [OpenFile] with [WithEncoder].
func WithDecoder(decode func(data []byte, v any) error) SourceOption {
	return func(c *sourceConfig) { c.decode = decode }
}

// WithSkipBadLines makes the source skip every line it cannot turn into an
// item, a torn or corrupt line or an item that does not decode, after
// passing its [*LineError] to report; by default Run stops at the first
// with that error. Report is called from the goroutine that runs the
// source. WithSkipBadLines panics if report is nil: skipping dead letters
// without a word would lose them silently.
func WithSkipBadLines(report func(*LineError)) SourceOption {
	if report == nil {
		panic("sluice: deadletter.WithSkipBadLines: nil report function")
	}
	return func(c *sourceConfig) { c.skip = report }
}

// WithDecisionNodes makes the source re-drive only the envelopes whose
// DecisionNode (the node that dead-lettered the item, whose input it is)
// is one of nodes, and pass over the others on purpose: a file that holds
// the dead letters of several nodes, of several item types, can be
// re-driven one node at a time. Without it every envelope is re-driven,
// and one whose item is not a T stops Run (see [Source]).
//
// WithDecisionNodes with no node is an error of the source, and so is a file none
// of whose envelopes comes from the nodes named (a misspelt node would
// otherwise re-drive nothing and succeed). Given more than once, the lists
// add up.
func WithDecisionNodes(nodes ...string) SourceOption {
	return func(c *sourceConfig) {
		if len(nodes) == 0 {
			c.sourceErr = errors.New("deadletter: WithDecisionNodes: no node named")
			return
		}
		if c.nodes == nil {
			c.nodes = map[string]bool{}
		}
		for _, n := range nodes {
			c.nodes[n] = true
		}
	}
}

// WithRotated makes the source read the files rotated away from its path
// first, oldest first, as [ReadAll] does.
func WithRotated() SourceOption {
	return func(c *sourceConfig) { c.rotated = true }
}

// Source returns a [node.Source] that re-drives the dead letters of the
// file at path: it decodes the item of every envelope, in order, into a T
// and emits it. Errors of the file and items that are not a T stop Run
// with a [*LineError] that names the line, unless [WithSkipBadLines] is
// given; an error of Emit stops Run with that error.
//
// An item is never turned into another: an envelope whose ItemType names
// another type than T (a pointer to T counts as T), a null item when T
// cannot be nil, and an item with fields T does not have are refused
// with [ErrUndecodableItem]. A T that is an interface type or
// json.RawMessage takes every item as it is.
//
// Run reads the file from the start each time it is called: a node
// restarted by the engine emits again what it emitted before, so the
// nodes that handle re-driven items must be idempotent.
func Source[T any](path string, opts ...SourceOption) node.Source[T] {
	cfg := sourceConfig{decode: strictUnmarshal}
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
		matched := 0
		others := map[string]bool{}
		for r, err := range records {
			if err == nil && cfg.nodes != nil {
				if !cfg.nodes[r.DecisionNode] {
					others[r.DecisionNode] = true
					continue
				}
				matched++
			}
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
		if cfg.nodes != nil && matched == 0 && len(others) > 0 {
			return fmt.Errorf("deadletter: source %s: WithDecisionNodes(%s): no envelope comes from these nodes; the file's come from %s",
				path, strings.Join(slices.Sorted(maps.Keys(cfg.nodes)), ", "), strings.Join(slices.Sorted(maps.Keys(others)), ", "))
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
	want := reflect.TypeFor[T]()
	if want.Kind() == reflect.Interface || want == reflect.TypeFor[json.RawMessage]() {
		if err := decode(raw, &item); err != nil {
			return fail(fmt.Errorf("into %s: %w", want, err))
		}
		return item, nil
	}
	if r.ItemType != "" && strings.TrimLeft(r.ItemType, "*") != strings.TrimLeft(typeName(want), "*") {
		return fail(fmt.Errorf("the item is a %s, not a %s", r.ItemType, typeName(want)))
	}
	if bytes.Equal(bytes.TrimSpace(raw), nullItem) {
		switch want.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map:
		default:
			return fail(fmt.Errorf("the item is null, and a %s cannot be", want))
		}
	}
	if err := decode(raw, &item); err != nil {
		return fail(fmt.Errorf("into %s: %w", want, err))
	}
	return item, nil
}

// strictUnmarshal is json.Unmarshal that refuses unknown fields and
// anything after the value, and decodes a number into an interface as a
// json.Number.
func strictUnmarshal(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	// A number bound for an interface stays as it was written, not a
	// float64 that would round a large one.
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the item")
	}
	return nil
}
