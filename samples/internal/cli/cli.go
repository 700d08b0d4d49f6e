// Package cli holds what the sample commands share about their command
// line.
package cli

import "fmt"

// NoArgs returns an error naming the first of args, the arguments left
// after the flags, if any: a sample takes flags only, and a stray word
// (a flag without its dash, a value after a boolean flag) must not be
// ignored.
func NoArgs(args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected argument %q (see -help)", args[0])
	}
	return nil
}
