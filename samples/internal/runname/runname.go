// Package runname names the messages of a sample's run after the run, so
// that a second run on a kept stream or queue does not take the names of
// the first's (which a duplicate window or an idempotent sink would take
// for duplicates).
package runname

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
)

// New returns a random name for a run.
func New() (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// Msg is the name of run's message i, "<run>-msg-<i>".
func Msg(run string, i int) string { return run + "-msg-" + strconv.Itoa(i) }

// Index is the i of a message named by Msg (or "msg-<i>", as the samples
// named them before), and false for a name that is neither.
func Index(name string) (int, bool) {
	at := strings.LastIndex(name, "msg-")
	if at < 0 {
		return 0, false
	}
	i, err := strconv.Atoi(name[at+len("msg-"):])
	return i, err == nil
}

// Of reports whether name is a message of run.
func Of(run, name string) bool { return strings.HasPrefix(name, run+"-msg-") }
