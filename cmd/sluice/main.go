// Command sluice is Sluice's command-line tool. Its dlq commands inspect
// and cut the dead-letter files that deadletter.OpenFile writes:
//
//	sluice dlq ls FILE
//	sluice dlq stats FILE
//	sluice dlq show FILE N
//	sluice dlq filter FILE [--node X] [--error-contains Y] -o OUT
//
// Exit codes: 0 when all went well; 1 for a problem with the data (a
// missing or unreadable file, torn or corrupt lines, no envelope at line
// N), reported on stderr after the good lines were used; 2 for a usage
// error. Run sluice help for the details.
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

Inspect the dead-letter files that a Sluice pipeline writes
(deadletter.OpenFile: JSON lines, one envelope per line).

Commands:
  dlq ls FILE       list the envelopes, one per line: the line number, the
                    time of the last failure, the node where the item
                    failed, the calls made and the error (shortened)
  dlq stats FILE    count the envelopes by node and by error
  dlq show FILE N   print the envelope on line N as indented JSON
  dlq filter FILE [--node X] [--error-contains Y] -o OUT
                    copy the envelopes whose origin or decision node is X
                    and whose error contains Y, unchanged, to the new file
                    OUT, which deadletter.ReadFile and deadletter.Source
                    read; OUT must not exist yet
  help              print this help

N is a line number as dlq ls prints it: a line that cannot be read keeps
its number, so the numbers of the others never shift. Rotated files
(FILE.000001, ...) are files of their own: give them one at a time.

Exit codes:
  0  success
  1  a problem with the data: a missing or unreadable file, torn or corrupt
     lines (each reported on stderr; every good line is still used), no
     envelope at line N, an OUT that exists already
  2  a usage error: an unknown command, missing or extra arguments, an
     unknown flag
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
	default:
		return usageError(stderr, fmt.Sprintf("unknown command %q", args[0]))
	}
}

func runDLQ(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return usageError(stderr, "dlq: no subcommand (ls, stats, show or filter)")
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "ls":
		return withFile(cmd, args, stdout, stderr, "FILE", func(file string, _ []string) int { return ls(file, stdout, stderr) })
	case "stats":
		return withFile(cmd, args, stdout, stderr, "FILE", func(file string, _ []string) int { return stats(file, stdout, stderr) })
	case "show":
		return withFile(cmd, args, stdout, stderr, "FILE N", func(file string, rest []string) int { return show(file, rest[0], stdout, stderr) })
	case "filter":
		return filter(args, stdout, stderr)
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
// in "filter FILE --node X -o OUT". ok is false when the caller should
// return code: after -h, or after a usage error.
func parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (positional []string, code int, ok bool) {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stdout, usage)
				return nil, exitOK, false
			}
			return nil, usageError(stderr, strings.TrimPrefix(fs.Name(), "sluice ")+": "+err.Error()), false
		}
		if fs.NArg() == 0 {
			return positional, 0, true
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
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
