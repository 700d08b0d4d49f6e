package main_test

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/doccheck"
)

// The session that docs/dead-letters.md shows, replayed command by command
// on dead letters like the ETL demo's (the same nodes, reasons, counts and
// times): each command's output is the block's, but for the broker's
// address and the queues' names, which are the test's. The commands that
// publish need RabbitMQ; without it they are skipped, after the others ran.
func TestDocDeadLetterSession(t *testing.T) {
	t.Parallel()
	page, err := doccheck.ReadPage(filepath.Join("..", "..", "docs", "dead-letters.md"))
	require.NoError(t, err)
	block, err := page.Output("cmd/sluice", "TestDocDeadLetterSession")
	require.NoError(t, err)
	steps := sessionSteps(block.Text)
	require.NotEmpty(t, steps)

	dir := t.TempDir()
	writeDemoLetters(t, filepath.Join(dir, "dead-letters.jsonl"))

	// The doc's names, and what the test uses instead once it has a broker.
	var rename *strings.Replacer
	for _, s := range steps {
		if rename == nil && needsBroker(s.command) {
			b := newBroker(t) // skips from here on without one
			u, err := url.Parse(b.url)
			require.NoError(t, err)
			rename = strings.NewReplacer(
				"amqp://guest:guest@localhost:5672/", b.url,
				"amqp://localhost:5672", "amqp://"+u.Host,
				`"orders-redrive"`, strconv.Quote(b.queue(t)),
				`"orders-dead"`, strconv.Quote(b.queue(t)),
			)
		}
		command, want := s.command, s.output
		if rename != nil {
			command, want = rename.Replace(command), rename.Replace(want)
			// The queue names in commands are bare; in outputs, quoted.
			command = unquoteQueues(rename, command)
		}
		assert.Equal(t, want, runStep(t, dir, command), "docs/dead-letters.md:%d: $ %s", block.Line+s.line, s.command)
	}
}

// A step is a command of a session and the output shown after it.
type step struct {
	line            int // of the command, from the block's first line
	command, output string
}

// sessionSteps splits a console block: each "$ " line is a command, the
// lines up to the next one (less the blank lines at the end) its output.
func sessionSteps(text string) []step {
	var steps []step
	for i, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if cmd, ok := strings.CutPrefix(line, "$ "); ok {
			steps = append(steps, step{line: i, command: cmd})
			continue
		}
		if len(steps) > 0 {
			steps[len(steps)-1].output += line + "\n"
		}
	}
	for i := range steps {
		steps[i].output = strings.TrimRight(steps[i].output, "\n") + "\n"
	}
	return steps
}

// needsBroker reports whether a command talks to RabbitMQ, or reads what
// one that did wrote.
func needsBroker(command string) bool {
	return strings.Contains(command, "--amqp") && !strings.Contains(command, "--dry-run") ||
		strings.Contains(command, ".redriven")
}

// unquoteQueues renames the bare queue names of a command, which rename
// knows quoted.
func unquoteQueues(rename *strings.Replacer, command string) string {
	fields := strings.Fields(command)
	for i, f := range fields {
		if f == "orders-redrive" || f == "orders-dead" {
			q, err := strconv.Unquote(rename.Replace(strconv.Quote(f)))
			if err == nil {
				fields[i] = q
			}
		}
	}
	return strings.Join(fields, " ")
}

// runStep runs a command of the session in dir: "sluice ARGS", "head -N
// FILE", or "sluice ARGS | head -N" or "| tail -N", and returns what it
// wrote to standard output; it fails the test when the command fails.
func runStep(t *testing.T, dir, command string) string {
	t.Helper()
	command, pipe, _ := strings.Cut(command, " | ")
	args := strings.Fields(command)
	var out string
	switch args[0] {
	case "sluice":
		code, stdout, stderr := sluice(t, dir, args[1:]...)
		require.Equal(t, 0, code, "$ %s\n%s", command, stderr)
		out = stdout
	case "head":
		require.Len(t, args, 3, "$ %s", command)
		data, err := os.ReadFile(filepath.Join(dir, args[2]))
		require.NoError(t, err)
		out = cut(t, args[1], string(data))
	default:
		t.Fatalf("$ %s: the test knows sluice and head only", command)
	}
	if pipe != "" {
		out = cut(t, pipe, out)
	}
	return out
}

// cut applies "head -N" or "tail -N" (or just "-N", for head) to text.
func cut(t *testing.T, filter, text string) string {
	t.Helper()
	f := strings.Fields(filter)
	if len(f) == 1 {
		f = []string{"head", f[0]}
	}
	require.Len(t, f, 2, "filter %q", filter)
	n, err := strconv.Atoi(strings.TrimPrefix(f[1], "-"))
	require.NoError(t, err, "filter %q", filter)
	lines := strings.SplitAfter(text, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	switch f[0] {
	case "head":
		lines = lines[:min(n, len(lines))]
	case "tail":
		lines = lines[max(0, len(lines)-n):]
	default:
		t.Fatalf("filter %q: head or tail only", filter)
	}
	return strings.Join(lines, "")
}

// demoOrder is the item of a demo letter.
type demoOrder struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Amount   string `json:"amount"`
	Currency string `json:"currency"`
}

// writeDemoLetters writes 976 dead letters like those of a run of the ETL
// demo, over seven seconds from 2026-11-30T22:20:48Z: 486 rows that did
// not parse, 395 orders that broke a rule, 95 in a currency the rate
// service does not know (lines 6, 7, 17, then every tenth from 20).
func writeDemoLetters(t *testing.T, path string) {
	t.Helper()
	type kind struct {
		node  string
		n     int
		error func(id string) string
	}
	row := func(id string) string { return id + ",cust-042,2026-11-30,12.3,EUR" }
	kinds := []kind{
		{"parse", 206, func(id string) string { return fmt.Sprintf("malformed row %q: amount: bad cents", row(id)) }},
		{"parse", 187, func(id string) string {
			return fmt.Sprintf("malformed row %q: fields: want 5, got 3", id+",cust-042,12.30")
		}},
		{"parse", 93, func(id string) string {
			return fmt.Sprintf("malformed row %q: date: parsing time %q as %q: cannot parse %q as %q", id+",cust-042,2026-1x-30,12.30,EUR", "2026-1x-30", "2006-01-02", "1x-30", "01")
		}},
		{"validate", 202, func(id string) string { return "order " + id + " breaks rule: amount must be positive" }},
		{"validate", 101, func(id string) string { return "order " + id + " breaks rule: date must not be in the future" }},
		{"validate", 92, func(id string) string { return "order " + id + " breaks rule: amount must be at most 1 000 000 EUR" }},
	}
	enrich := map[int]bool{6: true, 7: true, 17: true}
	for k := range 92 {
		enrich[20+10*k] = true
	}
	const total = 976
	start := time.Date(2026, 11, 30, 22, 20, 48, 0, time.UTC)
	f, err := deadletter.OpenFile(path)
	require.NoError(t, err)
	next := 0 // the kind whose turn it is, round robin over those left
	for line := 1; line <= total; line++ {
		id := fmt.Sprintf("ord-%07d", line*97)
		at := start.Add(time.Duration((line-1)*7/total) * time.Second)
		env := deadletter.Envelope{
			Item:     demoOrder{ID: id, Customer: "cust-042", Amount: "12.30", Currency: "EUR"},
			Pipeline: "orders-etl", RunID: "run-1", Attempts: 1, FirstFailure: at, LastFailure: at,
		}
		if enrich[line] {
			env.Item = demoOrder{ID: id, Customer: "cust-042", Amount: "12.30", Currency: "XAU"}
			env.OriginNode, env.DecisionNode, env.ErrText = "enrich", "enrich", `rates: unknown currency "XAU"`
		} else {
			for kinds[next%len(kinds)].n == 0 {
				next++
			}
			k := &kinds[next%len(kinds)]
			k.n--
			next++
			env.OriginNode, env.DecisionNode, env.ErrText = k.node, k.node, k.error(id)
		}
		require.NoError(t, f.Write(t.Context(), env))
	}
	require.NoError(t, f.Close())
	for _, k := range kinds {
		require.Zero(t, k.n, "every letter placed")
	}
}
