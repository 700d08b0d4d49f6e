// Command sluice is Sluice's command-line tool. Its dlq commands inspect,
// cut and re-drive the dead-letter files that deadletter.OpenFile writes,
// and its rabbitmq command moves messages between queues:
//
//	sluice dlq ls [--node X] [--rotated] FILE...
//	sluice dlq stats [--by node,reason,error,run] [--top N] [--rotated] FILE...
//	sluice dlq show FILE N
//	sluice dlq filter [--node X] [--error-contains Y] [--rotated] -o OUT FILE...
//	sluice dlq redrive --amqp URL (--queue Q | --exchange X [--routing-key K]) [--node X] [--ledger L] [--dry-run] FILE...
//	sluice rabbitmq requeue --amqp URL --from Q --to Q [--limit N]
//
// Exit codes: 0 when all went well; 1 for a problem with the data (a
// missing or unreadable file, torn or corrupt lines, no envelope at line
// N, a publish the broker refused), reported on stderr after the good
// lines were used; 2 for a usage error. Run sluice help for the details.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// Exit codes, for scripts.
const (
	exitOK    = 0 // all went well
	exitData  = 1 // a problem with the data
	exitUsage = 2 // a usage error
)

const usage = `Usage: sluice <command> [arguments]

Inspect, cut and re-drive the dead-letter files that a Sluice pipeline
writes (deadletter.OpenFile: JSON lines, one envelope per line), and move
messages between RabbitMQ queues.

Commands:
  dlq ls [--node X] [--rotated] FILE...
        List the envelopes, one per line: the line number, the time of the
        last failure, the node where the item failed, the calls made and
        the error (shortened); with several files, the file too.
        --node X    only envelopes whose origin or decision node is X

  dlq stats [--by node,reason,error,run] [--top N] [--rotated] FILE...
        Count the envelopes, by node and by reason unless --by says
        otherwise. REASON is the error with one item's detail stripped:
        quoted text becomes "…", a number N (a status code from 100 to 599
        stays; 1 000 000 and 1,000,000 are one N), the digits in a word N
        (ord-N), so one cause is one group.
        ERROR is the whole error text; RUN the run ID. --top N shows the N
        largest groups of each count (default 10; 0 shows all).

  dlq show FILE N
        Print the envelope on line N as indented JSON.

  dlq filter [--node X] [--error-contains Y] [--rotated] -o OUT FILE...
        Copy the envelopes whose origin or decision node is X and whose
        error contains Y, unchanged, to OUT, which deadletter.ReadFile and
        deadletter.Source read. OUT must be a new file, - (standard
        output) or an existing file that is not a regular file, such as
        /dev/stdout; the count then goes to standard error.

  dlq redrive --amqp URL (--queue Q | --exchange X [--routing-key K])
              [--node X] [--ledger L] [--dry-run] [--timeout D] FILE...
        Publish the item of each envelope as it was (a rabbitmq.Message's
        own body and properties, a []byte's bytes, else its JSON) to a
        queue or an exchange, with publisher confirms; the message keeps the
        item's correlation ID. Each letter re-driven is recorded in the
        ledger L (default: the first FILE + .redriven) with where it went
        (broker, vhost, queue or exchange) once the broker confirmed it, so
        that a second redrive to the same place sends only letters not sent
        there before. An envelope whose item was never encoded, or that
        no publish can carry, is reported, not sent; the others are. A
        letter published again because the connection was lost before
        its confirm came may be on the broker twice: it is named, and
        counted on the last line.
        --dry-run lists what would be sent and touches nothing.

  rabbitmq requeue --amqp URL --from Q --to Q [--limit N] [--timeout D]
        Move messages from the queue --from (a dead-letter queue) to the
        queue --to: each is published with confirms, then acked, so a
        crash leaves a message in both queues, never in neither. A message
        keeps its properties, without the headers of its earlier life
        (x-death, x-first-death-*, x-last-death-*, x-delivery-count,
        x-sluice-*); a dead letter of rabbitmq.DeadLetterPublisher gives
        back its item. A message published again because the connection
        was lost before its confirm came may be on --to twice, and one
        whose confirm did not come within --timeout goes back to --from
        and may be on --to too: both are named. Ctrl-C stops between two
        messages, after the one under way.
        Without --limit it moves the messages --from holds when it starts.

  help  Print this help.

Every reading command but dlq show takes --rotated: read each FILE's
rotated files (FILE.000001, ...) first, oldest first, as deadletter.ReadAll
does. N in dlq show is a line number as dlq ls prints it: a line that
cannot be read keeps its number, so the numbers of the others never shift.

Examples:
  sluice dlq stats sluice-demo/dead-letters.jsonl
  sluice dlq stats --by reason --top 0 --rotated sluice-demo/dead-letters.jsonl
  sluice dlq ls --node enrich sluice-demo/dead-letters.jsonl
  sluice dlq filter --node enrich -o - sluice-demo/dead-letters.jsonl | wc -l
  sluice dlq redrive --amqp amqp://guest:guest@localhost:5672/ --queue orders \
      --node enrich --dry-run sluice-demo/dead-letters.jsonl
  sluice rabbitmq requeue --amqp amqp://guest:guest@localhost:5672/ \
      --from orders_dead --to orders

Exit codes:
  0  success
  1  a problem with the data: a missing or unreadable file, torn or corrupt
     lines (each reported on stderr; every good line is still used), no
     envelope at line N, an OUT that exists already, an item never encoded
     or that no publish can carry, output that cannot be written, a publish
     the broker refused or did not confirm
  2  a usage error: an unknown command, missing or extra arguments, an
     unknown flag, a flag's value out of range (--timeout 0 or less)
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command line args and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return usageError(stderr, "no command")
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "dlq":
		return runDLQ(args[1:], stdout, stderr)
	case "rabbitmq":
		return runRabbitMQ(args[1:], stdout, stderr)
	default:
		return usageError(stderr, fmt.Sprintf("unknown command %q", args[0]))
	}
}

func runDLQ(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return usageError(stderr, "dlq: no subcommand (ls, stats, show, filter or redrive)")
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "ls":
		return ls(args, stdout, stderr)
	case "stats":
		return stats(args, stdout, stderr)
	case "show":
		return withFile(cmd, args, stdout, stderr, "FILE N", func(file string, rest []string) int { return show(file, rest[0], stdout, stderr) })
	case "filter":
		return filter(args, stdout, stderr)
	case "redrive":
		return redrive(args, stdout, stderr)
	default:
		return usageError(stderr, fmt.Sprintf("dlq: unknown subcommand %q", cmd))
	}
}

// withFile parses the arguments of a subcommand without flags, whose
// arguments are named by want ("FILE N"), then runs f.
func withFile(cmd string, args []string, stdout, stderr io.Writer, want string, f func(file string, rest []string) int) int {
	fs := newFlagSet(cmd)
	positional, code, ok := parse(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(positional) != len(strings.Fields(want)) {
		return wrongArgs(stderr, cmd, want, positional)
	}
	return f(positional[0], positional[1:])
}

func wrongArgs(stderr io.Writer, cmd, want string, got []string) int {
	return usageError(stderr, fmt.Sprintf("dlq %s: want %s, got %d arguments %q", cmd, want, len(got), got))
}

func newFlagSet(cmd string) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice dlq "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse reports errors itself
	return fs
}

// parse parses args with flags and positional arguments in any order, as
// in "filter FILE --node X -o OUT"; after "--" every argument is
// positional, unless that "--" is a flag's value ("-o --").
func parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (positional []string, code int, ok bool) {
	var rest []string
	if i := endOfFlags(fs, args); i >= 0 {
		args, rest = args[:i], args[i+1:]
	}
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stdout, usage)
				return nil, exitOK, false
			}
			return nil, usageError(stderr, strings.TrimPrefix(fs.Name(), "sluice ")+": "+err.Error()), false
		}
		if fs.NArg() == 0 {
			return append(positional, rest...), 0, true
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// endOfFlags returns the index of the "--" in args that ends the flags,
// skipping the value of each flag that takes one; -1 when there is none.
func endOfFlags(fs *flag.FlagSet, args []string) int {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return i
		case len(a) < 2 || a[0] != '-' || strings.Contains(a, "="):
			continue
		}
		f := fs.Lookup(strings.TrimLeft(a, "-"))
		if f == nil {
			continue // Parse reports it
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
			i++ // its value, whatever it is
		}
	}
	return -1
}

func usageError(stderr io.Writer, msg string) int {
	fmt.Fprintf(stderr, "sluice: %s\nRun 'sluice help' for usage.\n", msg)
	return exitUsage
}

// dataError reports a problem with the data; the caller goes on with the
// good lines and returns exitData at the end.
func dataError(stderr io.Writer, err error) {
	fmt.Fprintf(stderr, "sluice: %v\n", err)
}
