package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/deadletter"
)

// errorWidth is how many characters of an error dlq ls shows.
const errorWidth = 60

// ls prints one line per envelope.
func ls(file string, stdout, stderr io.Writer) int {
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LINE\tLAST FAILURE\tNODE\tATTEMPTS\tERROR")
	code, bad := eachRecord(file, stderr, func(r deadletter.Record) {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\n", r.Line, formatTime(r.LastFailure), orDash(r.OriginNode), r.Attempts, orDash(shorten(oneLine(r.ErrText), errorWidth)))
	})
	if bad < 0 {
		return code
	}
	if err := tw.Flush(); err != nil {
		dataError(stderr, err)
		return exitData
	}
	return code
}

// stats prints counts of the envelopes by node and by error.
func stats(file string, stdout, stderr io.Writer) int {
	var total int
	var first, last time.Time
	byNode, byError := map[string]int{}, map[string]int{}
	code, bad := eachRecord(file, stderr, func(r deadletter.Record) {
		total++
		byNode[orDash(r.OriginNode)]++
		byError[orDash(oneLine(r.ErrText))]++
		if !r.FirstFailure.IsZero() && (first.IsZero() || r.FirstFailure.Before(first)) {
			first = r.FirstFailure
		}
		if r.LastFailure.After(last) {
			last = r.LastFailure
		}
	})
	if bad < 0 {
		return code
	}

	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "envelopes\t%d\n", total)
	fmt.Fprintf(tw, "bad lines\t%d\n", bad)
	fmt.Fprintf(tw, "first failure\t%s\n", formatTime(first))
	fmt.Fprintf(tw, "last failure\t%s\n", formatTime(last))
	for _, group := range []struct {
		title  string
		counts map[string]int
	}{{"NODE", byNode}, {"ERROR", byError}} {
		fmt.Fprintf(tw, "\nCOUNT\t%s\n", group.title)
		for _, key := range byCount(group.counts) {
			fmt.Fprintf(tw, "%d\t%s\n", group.counts[key], key)
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
			if err := json.Indent(&out, r.Raw, "", "  "); err != nil {
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

// filter copies the matching envelopes to a new file.
func filter(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("filter")
	node := fs.String("node", "", "keep envelopes whose origin or decision node is `X`")
	contains := fs.String("error-contains", "", "keep envelopes whose error contains `Y`")
	out := fs.String("o", "", "write the envelopes to the new file `OUT`")
	positional, code, ok := parse(fs, args, stdout, stderr)
	switch {
	case !ok:
		return code
	case len(positional) != 1:
		return wrongArgs(stderr, "filter", "FILE", positional)
	case *out == "":
		return usageError(stderr, "dlq filter: -o OUT is required")
	}
	file := positional[0]

	// Open the input first, so that a missing input creates no output.
	in, err := os.Open(file)
	if err != nil {
		dataError(stderr, fmt.Errorf("deadletter: %w", err))
		return exitData
	}
	in.Close()
	// O_EXCL: never overwrite dead letters, the input's least of all.
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		dataError(stderr, fmt.Errorf("dlq filter: -o must name a new file: %w", err))
		return exitData
	}
	w := &errWriter{w: f}
	kept, total := 0, 0
	code, _ = eachRecord(file, stderr, func(r deadletter.Record) {
		total++
		if *node != "" && r.OriginNode != *node && r.DecisionNode != *node {
			return
		}
		if !strings.Contains(r.ErrText, *contains) {
			return
		}
		kept++
		w.Write(r.Raw)
		w.Write([]byte{'\n'})
	})
	err = errors.Join(w.err, f.Sync(), f.Close())
	if err != nil {
		dataError(stderr, fmt.Errorf("%s: %w", *out, err))
		return exitData
	}
	fmt.Fprintf(stdout, "%d of %d envelopes written to %s\n", kept, total, *out)
	return code
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

// eachRecord calls f for every envelope of file and reports every bad line
// on stderr. It returns exitData if there was a bad line or the file could
// not be read, else exitOK, with the number of bad lines; bad is -1 when
// the file could not be read at all.
func eachRecord(file string, stderr io.Writer, f func(deadletter.Record)) (code, bad int) {
	code = exitOK
	for r, err := range deadletter.ReadRecords(file) {
		if err != nil {
			dataError(stderr, err)
			code = exitData
			var le *deadletter.LineError
			if !errors.As(err, &le) {
				return code, -1
			}
			bad++
			continue
		}
		f(r)
	}
	return code, bad
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
// space, so that a text fits a table's cell.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// shorten cuts s to n characters, the last of them an ellipsis.
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	runes := []rune(s)
	return string(runes[:n-1]) + "…"
}
