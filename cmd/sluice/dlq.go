package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/deadletter"
)

// errorWidth is how many characters of an error dlq ls shows.
const errorWidth = 60

// input is the files a dlq command reads: the named files, each after
// the files its rotation produced when rotated is set.
type input struct {
	files   []string
	rotated bool
}

// addInputFlags defines the flags every reading command shares.
func addInputFlags(fs *flag.FlagSet, in *input) {
	fs.BoolVar(&in.rotated, "rotated", false, "read each FILE's rotated files (FILE.000001, ...) first, oldest first")
}

// paths returns the files to read, in order. A missing FILE is no error
// when it has rotated files.
func (in input) paths(stderr io.Writer) (paths []string, code int) {
	code = exitOK
	for _, file := range in.files {
		if !in.rotated {
			paths = append(paths, file)
			continue
		}
		rotated, err := deadletter.Rotated(file)
		if err != nil {
			dataError(stderr, err)
			code = exitData
			continue
		}
		paths = append(paths, rotated...)
		if _, err := os.Stat(file); err == nil || len(rotated) == 0 {
			paths = append(paths, file)
		}
	}
	return paths, code
}

// each calls f for every envelope of the input and reports every bad line
// and unreadable file on stderr. It returns exitData if there was one,
// else exitOK, with the number of bad lines; read is false when no file
// could be read at all.
func (in input) each(stderr io.Writer, f func(deadletter.Record)) (code, bad int, read bool) {
	paths, code := in.paths(stderr)
	bad, read = eachIn(paths, stderr, f, &code)
	return code, bad, read
}

// eachIn is each over paths, found once: a command that writes a file
// among them must not find it anew. A bad line or unreadable file sets
// *code to exitData.
func eachIn(paths []string, stderr io.Writer, f func(deadletter.Record), code *int) (bad int, read bool) {
	for _, path := range paths {
		opened := true
		for r, err := range deadletter.ReadRecords(path) {
			if err != nil {
				dataError(stderr, err)
				*code = exitData
				var le *deadletter.LineError
				if !errors.As(err, &le) {
					opened = false
					break
				}
				bad++
				continue
			}
			f(r)
		}
		read = read || opened
	}
	return bad, read
}

// ls prints one line per envelope, with its file when there are several.
func ls(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("ls")
	var in input
	addInputFlags(fs, &in)
	node := fs.String("node", "", "list only envelopes whose origin or decision node is `X`")
	positional, code, ok := parse(fs, args, stdout, stderr)
	switch {
	case !ok:
		return code
	case len(positional) == 0:
		return wrongArgs(stderr, "ls", "FILE...", positional)
	}
	in.files = positional
	paths, _ := in.paths(io.Discard)
	withFile := len(paths) > 1

	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	if withFile {
		fmt.Fprint(tw, "FILE\t")
	}
	fmt.Fprintln(tw, "LINE\tLAST FAILURE\tNODE\tATTEMPTS\tERROR")
	code, _, read := in.each(stderr, func(r deadletter.Record) {
		if *node != "" && r.OriginNode != *node && r.DecisionNode != *node {
			return
		}
		if withFile {
			fmt.Fprintf(tw, "%s\t", r.Path)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\n", r.Line, formatTime(r.LastFailure), orDash(oneLine(r.OriginNode)), r.Attempts, orDash(shorten(oneLine(r.ErrText), errorWidth)))
	})
	if !read {
		return code
	}
	if err := tw.Flush(); err != nil {
		dataError(stderr, err)
		return exitData
	}
	return code
}

// A grouping is one way dlq stats counts envelopes.
type grouping struct {
	name, title string
	key         func(deadletter.Record) string
}

// groupings are what dlq stats counts by, in the order it prints them.
var groupings = []grouping{
	{"node", "NODE", func(r deadletter.Record) string { return orDash(oneLine(r.OriginNode)) }},
	{"reason", "REASON", func(r deadletter.Record) string { return orDash(reason(r.ErrText)) }},
	{"error", "ERROR", func(r deadletter.Record) string { return orDash(oneLine(r.ErrText)) }},
	{"run", "RUN", func(r deadletter.Record) string { return orDash(oneLine(r.RunID)) }},
}

// stats prints counts of the envelopes: by node and by reason, or by what
// --by names.
func stats(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("stats")
	var in input
	addInputFlags(fs, &in)
	by := fs.String("by", "node,reason", "count by `node|reason|error|run`, or several, comma-separated")
	top := fs.Int("top", 10, "show the `N` largest groups of each count; 0 shows all")
	positional, code, ok := parse(fs, args, stdout, stderr)
	switch {
	case !ok:
		return code
	case len(positional) == 0:
		return wrongArgs(stderr, "stats", "FILE...", positional)
	case *top < 0:
		return usageError(stderr, fmt.Sprintf("dlq stats: --top %d: must not be negative", *top))
	}
	in.files = positional
	var chosen []int
	for _, name := range strings.Split(*by, ",") {
		i := slices.IndexFunc(groupings, func(g grouping) bool { return g.name == strings.TrimSpace(name) })
		if i < 0 {
			return usageError(stderr, fmt.Sprintf("dlq stats: --by %q: want node, reason, error or run", name))
		}
		if !slices.Contains(chosen, i) {
			chosen = append(chosen, i)
		}
	}

	var total int
	var first, last time.Time
	counts := make([]map[string]int, len(groupings))
	for i := range counts {
		counts[i] = map[string]int{}
	}
	code, bad, read := in.each(stderr, func(r deadletter.Record) {
		total++
		for _, i := range chosen {
			counts[i][groupings[i].key(r)]++
		}
		if !r.FirstFailure.IsZero() && (first.IsZero() || r.FirstFailure.Before(first)) {
			first = r.FirstFailure
		}
		if r.LastFailure.After(last) {
			last = r.LastFailure
		}
	})
	if !read {
		return code
	}

	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "envelopes\t%d\n", total)
	fmt.Fprintf(tw, "bad lines\t%d\n", bad)
	fmt.Fprintf(tw, "first failure\t%s\n", formatTime(first))
	fmt.Fprintf(tw, "last failure\t%s\n", formatTime(last))
	for _, i := range chosen {
		fmt.Fprintf(tw, "\nCOUNT\t%s\n", groupings[i].title)
		keys := byCount(counts[i])
		shown := keys
		if *top > 0 && len(keys) > *top {
			shown = keys[:*top]
		}
		for _, key := range shown {
			fmt.Fprintf(tw, "%d\t%s\n", counts[i][key], key)
		}
		if rest := keys[len(shown):]; len(rest) > 0 {
			n := 0
			for _, key := range rest {
				n += counts[i][key]
			}
			fmt.Fprintf(tw, "%d\t(%d more %ss; --top 0 shows all)\n", n, len(rest), groupings[i].name)
		}
	}
	if err := tw.Flush(); err != nil {
		dataError(stderr, err)
		return exitData
	}
	return code
}

// byCount returns the keys of counts, the largest count first, then by
// key.
func byCount(counts map[string]int) []string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), strings.Compare(a, b))
	})
	return keys
}

// show prints the envelope on line n as indented JSON, as it is in the
// file, fields the reader does not know included.
func show(file, n string, stdout, stderr io.Writer) int {
	line, err := strconv.Atoi(n)
	if err != nil || line < 1 {
		return usageError(stderr, fmt.Sprintf("dlq show: line number %q is not a positive integer", n))
	}
	for r, err := range deadletter.ReadRecords(file) {
		if err != nil {
			var le *deadletter.LineError
			if !errors.As(err, &le) || le.Line == line {
				dataError(stderr, err)
				return exitData
			}
			if le.Line > line {
				break
			}
			continue // only line n matters here
		}
		if r.Line > line {
			break // line n was blank
		}
		if r.Line == line {
			var out bytes.Buffer
			raw, err := bytesAsText(r.Raw)
			if err == nil {
				err = json.Indent(&out, raw, "", "  ")
			}
			if err != nil {
				dataError(stderr, fmt.Errorf("%s:%d: %w", file, line, err))
				return exitData
			}
			out.WriteByte('\n')
			if _, err := stdout.Write(out.Bytes()); err != nil {
				dataError(stderr, err)
				return exitData
			}
			return exitOK
		}
	}
	dataError(stderr, fmt.Errorf("%s: no envelope at line %d", file, line))
	return exitData
}

// bytesAsText returns the envelope line raw with the bytes of its item
// (a []byte item, a rabbitmq.Message's body, a nats.Message's data),
// which JSON holds as base64, as text when they are valid UTF-8 without a
// NUL: people read them. Beside the bytes' field X it adds X_encoding,
// "text" or "base64", to say which. Other fields stay as they are, in
// their order.
func bytesAsText(raw []byte) ([]byte, error) {
	top, err := fields(raw)
	if err != nil || top == nil {
		return raw, err
	}
	var itemType string
	for _, f := range top {
		if f.key == "item_type" {
			_ = json.Unmarshal(f.val, &itemType)
		}
	}
	for i, f := range top {
		if f.key != "item" {
			continue
		}
		switch {
		case itemType == "[]uint8":
			top = decodeBytes(top, i)
		case strings.HasSuffix(itemType, "/connector/rabbitmq.Message"), strings.HasSuffix(itemType, "/connector/nats.Message"):
			item, err := fields(f.val)
			if err != nil || item == nil {
				return raw, err
			}
			for j, g := range item {
				if g.key == "body" || g.key == "data" {
					item = decodeBytes(item, j)
					break
				}
			}
			top[i].val = joinFields(item)
		}
		break
	}
	return joinFields(top), nil
}

// A field is one member of a JSON object, its value as it was.
type field struct {
	key string
	val json.RawMessage
}

// fields returns the members of the JSON object raw in their order, or
// nil when raw is not an object.
func fields(raw []byte) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, err
	}
	var out []field
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, err
		}
		out = append(out, field{tok.(string), val})
	}
	return out, nil
}

func joinFields(fs []field) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range fs {
		if i > 0 {
			b.WriteByte(',')
		}
		key := quote(f.key)
		b.Write(key)
		b.WriteByte(':')
		b.Write(f.val)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// quote returns s as a JSON string, without escaping <, > and & as
// json.Marshal does: the output is for people to read (an XML body, a query
// string), and it is not HTML.
func quote(s string) []byte {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	_ = e.Encode(s) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// decodeBytes turns fs[i], bytes as base64, into text when they are
// valid UTF-8 without a NUL, and adds the field that says which.
func decodeBytes(fs []field, i int) []field {
	var data []byte
	if err := json.Unmarshal(fs[i].val, &data); err != nil || data == nil {
		return fs // not bytes, or null
	}
	encoding := "base64"
	if utf8.Valid(data) && !bytes.Contains(data, []byte{0}) {
		encoding = "text"
		fs[i].val = quote(string(data))
	}
	enc, _ := json.Marshal(encoding)
	return slices.Insert(fs, i+1, field{fs[i].key + "_encoding", enc})
}

// filter copies the matching envelopes to a new file, or to standard
// output with -o -.
func filter(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("filter")
	var in input
	addInputFlags(fs, &in)
	node := fs.String("node", "", "keep envelopes whose origin or decision node is `X`")
	contains := fs.String("error-contains", "", "keep envelopes whose error contains `Y`")
	out := fs.String("o", "", "write the envelopes to the new file `OUT`; - is standard output")
	positional, code, ok := parse(fs, args, stdout, stderr)
	switch {
	case !ok:
		return code
	case len(positional) == 0:
		return wrongArgs(stderr, "filter", "FILE...", positional)
	case *out == "":
		return usageError(stderr, "dlq filter: -o OUT is required")
	}
	in.files = positional

	// Look at the input first, so that a missing input creates no output,
	// and find it once: the output, made next, is never read as input.
	paths, code := in.paths(stderr)
	for _, path := range paths {
		// A file that is not regular (a named pipe) is not opened to be
		// looked at: closing a pipe its writer has opened would cut the
		// writer off (a broken pipe), and the read after would wait for
		// a writer for good.
		if info, err := os.Stat(path); err == nil && info.IsDir() {
			// Refused before the output is made: a run that reads nothing
			// leaves no empty OUT behind, which the next run would refuse.
			dataError(stderr, fmt.Errorf("deadletter: %s: is a directory", path))
			return exitData
		} else if err != nil || info.Mode().IsRegular() {
			f, err := os.Open(path)
			if err != nil {
				dataError(stderr, fmt.Errorf("deadletter: %w", err))
				return exitData
			}
			f.Close()
		}
		if *out == "-" && isStdout(path) || *out != "-" && sameFile(*out, path) {
			// Appended to its own input, filter would read back what it
			// writes, for ever.
			return usageError(stderr, fmt.Sprintf("dlq filter: -o %s is the input %s", *out, path))
		}
	}
	w, report, err := createOutput(*out, stdout, stderr)
	if err != nil {
		dataError(stderr, err)
		return exitData
	}
	ew := &errWriter{w: w}
	kept, total := 0, 0
	rcode := exitOK
	eachIn(paths, stderr, func(r deadletter.Record) {
		total++
		if *node != "" && r.OriginNode != *node && r.DecisionNode != *node {
			return
		}
		if !strings.Contains(r.ErrText, *contains) {
			return
		}
		kept++
		ew.Write(r.Raw)
		ew.Write([]byte{'\n'})
	}, &rcode)
	if err := errors.Join(ew.err, w.Close()); err != nil {
		dataError(stderr, fmt.Errorf("%s: %w", *out, err))
		return exitData
	}
	name := *out
	if name == "-" {
		name = "standard output"
	}
	if _, err := fmt.Fprintf(report, "%d of %d envelopes written to %s\n", kept, total, name); err != nil {
		dataError(stderr, fmt.Errorf("the count: %w", err))
		return exitData
	}
	return max(code, rcode)
}

// createOutput opens what -o names: standard output for -, an existing
// file that is not a regular file (/dev/stdout, a pipe) as it is, else a
// new file, never one that exists: dead letters are not overwritten. The
// count goes to report: stderr when the envelopes go to standard output.
func createOutput(name string, stdout, stderr io.Writer) (w io.WriteCloser, report io.Writer, err error) {
	if name == "-" || isStdout(name) {
		return nopCloser{stdout}, stderr, nil
	}
	if info, err := os.Stat(name); err == nil && !info.Mode().IsRegular() {
		f, err := os.OpenFile(name, os.O_WRONLY, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("dlq filter: -o: %w", err)
		}
		return f, stderr, nil
	}
	// O_EXCL: never overwrite dead letters, the input's least of all.
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("dlq filter: -o must name a new file: %w", err)
	}
	return syncCloser{f}, stdout, nil
}

// sameFile reports whether the files a and b name both exist and are one.
func sameFile(a, b string) bool {
	ai, err := os.Stat(a)
	if err != nil {
		return false
	}
	bi, err := os.Stat(b)
	return err == nil && os.SameFile(ai, bi)
}

// isStdout reports whether name is this process's standard output, as
// /dev/stdout is, even when that is a regular file.
func isStdout(name string) bool {
	named, err := os.Stat(name)
	if err != nil {
		return false
	}
	out, err := os.Stdout.Stat()
	return err == nil && os.SameFile(named, out)
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// syncCloser syncs a new file before it closes it.
type syncCloser struct{ f *os.File }

func (s syncCloser) Write(p []byte) (int, error) { return s.f.Write(p) }
func (s syncCloser) Close() error {
	// The file is new: its name is synced too, so that a crash keeps it.
	return errors.Join(s.f.Sync(), syncParent(s.f.Name()), s.f.Close())
}

// syncParent fsyncs the directory that holds path, so that a file made
// there keeps its name after a crash.
func syncParent(path string) error {
	if runtime.GOOS == "windows" {
		return nil // a directory cannot be opened for syncing there
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// errWriter keeps the first write error, so that a loop can write on and
// check once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(p)
	}
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine turns runs of white space, newlines and tabs included, into one
// space, so that a text fits a table's cell, and shows every other control
// character as an escape (\x1b): an error text may come from a remote
// service, and a terminal would act on its escape sequences.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) { // C0, DEL and C1: all below 0x100
			fmt.Fprintf(&b, `\x%02x`, r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// shorten cuts s to n characters, the last of them an ellipsis.
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	runes := []rune(s)
	return string(runes[:n-1]) + "…"
}
