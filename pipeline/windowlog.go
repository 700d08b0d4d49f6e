package pipeline

import (
	"bytes"
	"cmp"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"
)

// The window log keeps an event-time Aggregate's windows from being
// written twice across a crash. A window that was handed on, complete,
// and whose output settled (the sink wrote it) is recorded in the node's
// log; each checkpoint saves the log beside the source's position, in a
// position envelope. A run resumed from that checkpoint reads again the
// items after the position, some of which fell in windows written before
// the crash: an item that falls only in windows the log holds settles
// Filtered, so that those windows are not handed on again.
//
// Beside its log, each such node's watermark is saved, and a resumed run
// starts the node's watermark there: an item that was late before the
// crash is late again, instead of reopening a window the log pruned. The
// watermark saved is the one consistent with the saved position, not the
// node's latest: that of the first item the node took (in the order it
// took them) that is after the position, before it moved it (see
// windowLog.took). Every item the resumed run reads again was either
// taken with a watermark at least as far, or not taken yet; so the saved
// watermark makes late no item that was on time before the crash. When
// the items reach the node in the order of their positions, the resumed
// run judges each item it reads again as the first run did.
//
//	position envelope = envelopeMagic + JSON {"v":1,"pos":…,"windows":{node: [{key,start,end}]},"watermarks":{node: {s,ns}}}
//
// "watermarks" came after "windows" in format version 1, and is optional:
// an envelope without it (written by an earlier version) loads with no
// watermark, and an earlier version ignores it.
//
// A window is recorded before its items settle in the ledger, and a save
// reads the ledger before the log: every window whose items the saved
// position passed is in the saved log, or was pruned because the position
// passed all its items and the saved watermark passed its end.

// envelopeMagic starts a position envelope. A position saved by an
// earlier version, or by a pipeline without a window log, is the source's
// own bytes, unless they start so: those are saved in an envelope too.
const envelopeMagic = "\x00sluice.position\x00"

// envelopeVersion is the format version of the position envelopes this
// version writes and reads.
const envelopeVersion = 1

// A posEnvelope is a source's position with the window logs of the
// event-time Aggregates that take its items, by node name.
type posEnvelope struct {
	V          int                        `json:"v"`
	Pos        []byte                     `json:"pos"`
	Windows    map[string][]loggedWindow  `json:"windows,omitempty"`
	Watermarks map[string]json.RawMessage `json:"watermarks,omitempty"`
}

// A savedWatermark is a node's watermark in an envelope: Unix seconds and
// nanoseconds, which hold any time.Time (RFC 3339 holds only years 0 to
// 9999, and Unix nanoseconds only 1678 to 2262).
type savedWatermark struct {
	S  *int64 `json:"s"`
	NS *int64 `json:"ns"`
}

// A loggedWindow is a written window: its key, as JSON, and its bounds in
// Unix nanoseconds.
type loggedWindow struct {
	Key   json.RawMessage `json:"key"`
	Start int64           `json:"start"`
	End   int64           `json:"end"`
	// Step is the node's window step in nanoseconds (its size for a
	// TimeWindow), so that a run resumed with another can be refused;
	// 0 in a checkpoint saved before it was kept.
	Step int64 `json:"step,omitempty"`
}

// encodePosition returns the envelope of pos with the window logs wins
// and the watermarks wms.
func encodePosition(pos []byte, wins map[string][]loggedWindow, wms map[string]time.Time) ([]byte, error) {
	env := posEnvelope{V: envelopeVersion, Pos: pos, Windows: wins}
	for node, wm := range wms {
		s, ns := wm.Unix(), int64(wm.Nanosecond())
		data, err := json.Marshal(savedWatermark{S: &s, NS: &ns})
		if err != nil {
			return nil, err
		}
		if env.Watermarks == nil {
			env.Watermarks = make(map[string]json.RawMessage, len(wms))
		}
		env.Watermarks[node] = data
	}
	data, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	return append([]byte(envelopeMagic), data...), nil
}

// decodePosition returns the source's position in saved and the window
// logs and watermarks saved with it, by node: saved itself and none when
// it is not an envelope (a checkpoint written before window logs, or
// without one). An envelope written before watermarks were saved has
// none.
func decodePosition(saved []byte) ([]byte, map[string][]loggedWindow, map[string]time.Time, error) {
	rest, ok := bytes.CutPrefix(saved, []byte(envelopeMagic))
	if !ok {
		return saved, nil, nil, nil
	}
	var env posEnvelope
	if err := json.Unmarshal(rest, &env); err != nil {
		return nil, nil, nil, fmt.Errorf("the position envelope is corrupt: %w", err)
	}
	if env.V != envelopeVersion {
		return nil, nil, nil, fmt.Errorf("the position envelope has format version %d; this version of sluice reads version %d", env.V, envelopeVersion)
	}
	var wms map[string]time.Time
	for _, node := range slices.Sorted(maps.Keys(env.Watermarks)) {
		raw := env.Watermarks[node]
		var sw savedWatermark
		err := json.Unmarshal(raw, &sw)
		switch {
		case err != nil:
		case sw.S == nil || sw.NS == nil:
			err = errors.New(`it needs both "s" and "ns"`)
		case *sw.NS < 0 || *sw.NS >= int64(time.Second):
			err = fmt.Errorf("%d nanoseconds is out of range", *sw.NS)
		case *sw.S > maxWatermarkSeconds || *sw.S < -maxWatermarkSeconds:
			// Near the ends of int64, time.Unix wraps: a time that prints
			// as a far future would compare as before today.
			err = fmt.Errorf("%d seconds is out of range", *sw.S)
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("the position envelope is corrupt: the watermark of Aggregate %q, %s: %w", node, raw, err)
		}
		if wms == nil {
			wms = make(map[string]time.Time, len(env.Watermarks))
		}
		wms[node] = time.Unix(*sw.S, *sw.NS).UTC()
	}
	return env.Pos, env.Windows, wms, nil
}

// maxWatermarkSeconds bounds a saved watermark's seconds, far beyond any
// event time (about 146 billion years), well within what time.Time holds
// without wrapping.
const maxWatermarkSeconds = 1 << 62

// A windowLogger is a node's window log, as the saver sees it.
type windowLogger interface {
	// name is the node's.
	name() string
	// snapshot returns the watermark to save with the committed item idx
	// (ok false: none), prunes the windows whose every item is at or
	// before idx and whose end that watermark passed, and returns the
	// rest, with how often the log changed.
	snapshot(idx uint64) (ws []loggedWindow, wm time.Time, ok bool, changed uint64, err error)
}

// A windowLog is the log of one Aggregate's written windows in a run:
// those written in the run and those the checkpoint held at its start.
// The node's goroutine asks it and moves its watermark; the sink's
// records a window when its output settles; the saver snapshots it.
type windowLog[K comparable] struct {
	node string
	mu   sync.Mutex
	wins map[windowID[K]]*logEntry
	// changed counts the windows recorded, for the saver to know that a
	// save is due.
	changed uint64
	// wm is the node's watermark; seen: it is set (the node took an item,
	// or the checkpoint held one).
	wm   time.Time
	seen bool
	// runs are the watermarks the node's items were taken with, for the
	// watermark a save keeps (see took); hi is the latest item noted.
	runs    []wmRun
	hi      uint64
	maxRuns int // maxWMRuns, but in tests
	// unlogged counts the windows left out because their key does not
	// come back equal from JSON.
	unlogged int
	// step is the node's window step, saved with each window.
	step time.Duration
}

// A wmRun is a run of items the node took one after the other, before
// which the watermark was wm (set false: it had none, as before the
// first item of a run without a saved one); maxIdx is the latest of them
// (the ledger's index).
type wmRun struct {
	wm     time.Time
	set    bool
	maxIdx uint64
}

// maxWMRuns bounds a log's runs: past it, pairs of runs are merged, each
// pair into its first watermark, the earlier. A save then keeps an
// earlier watermark than it could, never a later one. The runs the
// committed position passed are dropped at each save, so only a node that
// takes more than this many items with distinct watermarks between the
// oldest item not settled and a save gets there.
const maxWMRuns = 1 << 14

// A logEntry is one written window. maxIdx is the latest item of it
// this run emitted (the ledger's index; 0: none).
type logEntry struct {
	end    int64
	maxIdx uint64
}

func (l *windowLog[K]) name() string { return l.node }

// newWindowLog returns node's log, with the windows saved and the
// watermark saved, if ok.
func newWindowLog[K comparable](node string, saved []loggedWindow, wm time.Time, ok bool) (*windowLog[K], error) {
	l := &windowLog[K]{node: node, wins: make(map[windowID[K]]*logEntry, len(saved)), wm: wm, seen: ok, maxRuns: maxWMRuns}
	for _, s := range saved {
		var k K
		if err := json.Unmarshal(s.Key, &k); err != nil {
			return nil, fmt.Errorf("pipeline: Aggregate %q: the checkpoint's window key %s does not decode into %T: %w", node, s.Key, k, err)
		}
		l.wins[timeWindowID(k, time.Unix(0, s.Start))] = &logEntry{end: s.End}
	}
	return l, nil
}

// checkLoggedSpec returns the error of an Aggregate whose windows are
// size long every step resumed from a checkpoint that logged windows of
// another length or step: such a window log does not name the node's
// windows, while the saved position passed the items of the windows it
// holds, so a window overlapping them would be handed on complete with
// part of its items. A checkpoint saved before the step was kept is
// checked for the size alone.
func checkLoggedSpec(node string, saved []loggedWindow, size, step time.Duration) error {
	for _, s := range saved {
		d, st := time.Duration(s.End-s.Start), time.Duration(s.Step)
		if d != size || (st != 0 && st != step) {
			was := fmt.Sprintf("%s long", d)
			if st != 0 {
				was += fmt.Sprintf(" every %s", st)
			}
			return fmt.Errorf("pipeline: Aggregate %q: the checkpoint logged windows %s, and the node's are %s long every %s: "+
				"resumed with another window size or step, windows would be handed on with part of their items; "+
				"resume with the windows the checkpoint was saved with, or start from a new checkpoint", node, was, size, step)
		}
	}
	return nil
}

// written reports whether window id, which ends at end, was written, and
// if so notes that item idx fell in it.
func (l *windowLog[K]) written(id windowID[K], end time.Time, idx uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.wins[id]
	if e == nil || e.end != end.UnixNano() {
		return false
	}
	e.maxIdx = max(e.maxIdx, idx)
	return true
}

// record records window id, which ends at end, as written; tr is its
// tracker.
func (l *windowLog[K]) record(id windowID[K], end time.Time, tr *tracker) {
	idx := tr.ledgerIdx()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wins[id] = &logEntry{end: end.UnixNano(), maxIdx: idx}
	l.changed++
}

// took notes that the node took item idx (the ledger's index; 0: none)
// with the watermark before (had false: none), which it moved to after.
//
// A save with the committed item P keeps the watermark before the first
// item taken whose index is after P: the items a resumed run reads again
// are those after P, and each was taken with that watermark or a later
// one, or is not taken yet (and will be with the node's watermark now, or
// a later one). Items that share a watermark make one run; an item whose
// index is not after the latest noted needs no note, since an earlier
// item is after P whenever it is.
func (l *windowLog[K]) took(idx uint64, before time.Time, had bool, after time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wm, l.seen = after, true
	if idx <= l.hi {
		return
	}
	l.hi = idx
	if n := len(l.runs); n > 0 && l.runs[n-1].set == had && l.runs[n-1].wm.Equal(before) {
		l.runs[n-1].maxIdx = idx
		return
	}
	if len(l.runs) >= l.maxRuns {
		// Merged by pairs, into the earlier watermark of each.
		n := 0
		for i := 0; i < len(l.runs); i += 2 {
			r := l.runs[i]
			if i+1 < len(l.runs) {
				r.maxIdx = l.runs[i+1].maxIdx
			}
			l.runs[n] = r
			n++
		}
		l.runs = slices.Delete(l.runs, n, len(l.runs))
	}
	l.runs = append(l.runs, wmRun{wm: before, set: had, maxIdx: idx})
}

// watermark returns the watermark to save with the committed item idx,
// and forgets the runs idx passed.
func (l *windowLog[K]) watermark(idx uint64) (time.Time, bool) {
	i := 0
	for i < len(l.runs) && l.runs[i].maxIdx <= idx {
		i++
	}
	l.runs = slices.Delete(l.runs, 0, i)
	if len(l.runs) > 0 {
		return l.runs[0].wm, l.runs[0].set
	}
	return l.wm, l.seen
}

func (l *windowLog[K]) snapshot(idx uint64) ([]loggedWindow, time.Time, bool, uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	swm, sok := l.watermark(idx)
	var out []loggedWindow
	for id, e := range l.wins {
		// Moot: no item the run reads again falls in it. Its items are
		// all at or before the position, and the saved watermark passed
		// its end: the resumed run starts its watermark there, so an item
		// after the position that falls in it is late.
		// Compared as times: a watermark before 1677 (an item's time
		// less a long maxLateness) wraps in Unix nanoseconds, past
		// every window's end.
		if sok && !swm.Before(time.Unix(0, e.end)) && e.maxIdx <= idx {
			delete(l.wins, id)
			continue
		}
		key, err := keyJSON(id.key)
		if err != nil {
			// A key value that does not come back equal from JSON (a
			// string that is not UTF-8, a key whose JSON methods lose
			// it) is left out of the log rather than failing the save:
			// a failed periodic save would stop every save, the
			// position's too. Its window may be written again after a
			// crash, as where no log is kept.
			delete(l.wins, id)
			l.unlogged++
			continue
		}
		out = append(out, loggedWindow{Key: key, Start: time.Unix(id.start, int64(id.nsec)).UnixNano(), End: e.end, Step: int64(l.step)})
	}
	// In a stable order, so that equal logs save equal bytes.
	slices.SortFunc(out, func(a, b loggedWindow) int {
		if c := bytes.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return cmp.Compare(a.Start, b.Start)
	})
	return out, swm, sok, l.changed, nil
}

// keyJSON returns k as JSON, once it checked that it decodes to k again:
// a key with a JSON method of its own may not.
func keyJSON[K comparable](k K) (json.RawMessage, error) {
	data, err := json.Marshal(k)
	if err != nil {
		return nil, fmt.Errorf("does not encode to JSON: %w", err)
	}
	var back K
	if err := json.Unmarshal(data, &back); err != nil || back != k {
		return nil, fmt.Errorf("does not round-trip through JSON (%s)", data)
	}
	return data, nil
}

// ledgerIdx returns the latest ledger index of the items t's item derives
// from; 0 when none was emitted with EmitAt under a ledger.
func (t *tracker) ledgerIdx() uint64 {
	switch {
	case t == nil:
		return 0
	case t.parents == nil:
		if t.led == nil {
			return 0
		}
		return t.idx
	}
	var m uint64
	for _, p := range t.parents {
		m = max(m, p.ledgerIdx())
	}
	return m
}

// logsWindows reports whether the Aggregate n keeps a window log in
// pipeline cfg of nodes: an event-time time window (tumbling or sliding)
// without AllowedLateness or an idle timeout, under WithCheckpoint, in a
// pipeline of exactly one source, which implements node.Resumable.
func logsWindows(cfg config, nodes []*spec, n *spec) bool {
	if n.windowKey == nil || !cfg.checkpointSet {
		return false
	}
	var src *spec
	for _, m := range nodes {
		if !m.consumes {
			if src != nil {
				return false // several sources: see docs/nodes.md
			}
			src = m
		}
	}
	return src != nil && src.resume != nil
}

// checkWindowLog returns the Build error of an Aggregate that keeps a
// window log with a key type that does not round-trip through JSON.
func checkWindowLog(cfg config, nodes []*spec, n *spec) []error {
	if !logsWindows(cfg, nodes, n) {
		return nil
	}
	if err := n.windowKey(); err != nil {
		return []error{fmt.Errorf("Aggregate key: %w; under WithCheckpoint the keys of the windows written are saved as JSON, so that a resumed run does not write them again: use a key of strings, integers or booleans, or of arrays or structs of them with exported fields", err)}
	}
	return nil
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
	jsonUnmarsh   = reflect.TypeFor[json.Unmarshaler]()
	textUnmarsh   = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// jsonKeyProblem says why a key of type t may not round-trip through
// JSON (decode to a value == to the one encoded); nil when it does.
func jsonKeyProblem(t reflect.Type) error {
	if t == reflect.TypeFor[time.Time]() {
		return errors.New("time.Time does not round-trip through JSON: == compares its location and monotonic reading, which JSON does not keep; use its UnixNano")
	}
	if t.Implements(jsonMarshaler) || t.Implements(textMarshaler) {
		if !reflect.PointerTo(t).Implements(jsonUnmarsh) && !reflect.PointerTo(t).Implements(textUnmarsh) {
			return fmt.Errorf("%s encodes to JSON by a method of its own and has no method to decode it back", t)
		}
		// Its methods are trusted here; each key is checked when saved.
		return nil
	}
	switch t.Kind() {
	case reflect.Bool, reflect.String,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return nil
	case reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return fmt.Errorf("%s does not round-trip through JSON (NaN and infinities do not encode)", t)
	case reflect.Array:
		if err := jsonKeyProblem(t.Elem()); err != nil {
			return fmt.Errorf("%s: %w", t, err)
		}
		return nil
	case reflect.Struct:
		named := map[string]string{} // JSON name to field
		for i := range t.NumField() {
			f := t.Field(i)
			switch {
			case !f.IsExported():
				return fmt.Errorf("%s: field %s is unexported, and JSON leaves it out", t, f.Name)
			case f.Tag.Get("json") == "-":
				return fmt.Errorf("%s: field %s is tagged json:\"-\", and JSON leaves it out", t, f.Name)
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" && !(f.Anonymous && f.Type.Kind() == reflect.Struct) {
				name = f.Name
			}
			if name != "" {
				if other, ok := named[name]; ok {
					return fmt.Errorf("%s: fields %s and %s have one JSON name, %q, and JSON keeps one of them at most", t, other, f.Name, name)
				}
				named[name] = f.Name
			}
			if err := jsonKeyProblem(f.Type); err != nil {
				return fmt.Errorf("%s.%s: %w", t, f.Name, err)
			}
		}
		return nil
	}
	return fmt.Errorf("%s (a %s) does not round-trip through JSON", t, t.Kind())
}
