package main_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runTo runs sluice in dir with its standard output on out.
func runTo(t *testing.T, dir string, out *os.File, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), stderr.String()
	}
	require.NoError(t, err)
	return 0, stderr.String()
}

// A command whose output cannot be written exits 1: redrive --dry-run's
// list and filter's count were dropped with exit 0 (a review's finding);
// ls, stats and show already failed.
func TestOutputThatCannotBeWrittenFails(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full here: %v", err)
	}
	defer full.Close()
	dir := t.TempDir()
	writeLetters(t, dir, "l.jsonl", 3)
	for _, args := range [][]string{
		{"dlq", "ls", "l.jsonl"},
		{"dlq", "stats", "l.jsonl"},
		{"dlq", "show", "l.jsonl", "1"},
		{"dlq", "redrive", "--amqp", "amqp://guest:guest@127.0.0.1:1/", "--queue", "q", "--dry-run", "l.jsonl"},
		{"dlq", "filter", "-o", "out.jsonl", "l.jsonl"},
	} {
		code, stderr := runTo(t, dir, full, args...)
		assert.Equal(t, 1, code, "%v: %s", args, stderr)
		assert.Contains(t, stderr, "no space left on device", "%v", args)
	}
}

// A filter whose input is a directory fails and leaves no output behind,
// as a missing input does: the empty OUT it left made the next run fail
// with "-o must name a new file" (a review's finding).
func TestFilterOfADirectoryMakesNoOutput(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d.jsonl"), 0o700))
	code, _, stderr := sluice(t, dir, "dlq", "filter", "-o", "out.jsonl", "d.jsonl")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "d.jsonl: is a directory")
	assert.NoFileExists(t, filepath.Join(dir, "out.jsonl"))
}

// A line read twice (a file and its filter copy) is sent once and counted
// as a repeat, not as a letter the ledger held: the count said "1 were
// already (ledger ...)" with no ledger (a review's finding).
func TestRedriveCountsARepeatedLineApart(t *testing.T) {
	dir := t.TempDir()
	writeLetters(t, dir, "l.jsonl", 1)
	code, stdout, stderr := sluice(t, dir, "dlq", "redrive", "--amqp", "amqp://127.0.0.1:1/", "--queue", "q", "--dry-run", "l.jsonl", "l.jsonl")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "1 of 2 envelopes would be re-driven to queue \"q\"; 0 were already (ledger l.jsonl.redriven); 1 repeated a line read before")
	assert.Equal(t, 1, strings.Count(stdout, "would re-drive "), stdout)
}

// A letter no publish can carry (its item_type says rabbitmq.Message, its
// item is not one) is reported and left, and the letters after it are
// re-driven: redrive stopped at it, run after run, and never sent them (a
// review's finding). Real RabbitMQ.
func TestRedriveGoesPastALetterItCannotPublish(t *testing.T) {
	b := newBroker(t)
	q := b.queue(t)
	dir := t.TempDir()
	writeLetters(t, dir, "l.jsonl", 1)
	good := firstRaw(t, filepath.Join(dir, "l.jsonl"))
	bad := `{"item":123,"item_type":"github.com/sluicehq/sluice/connector/rabbitmq.Message","error":"x","origin_node":"n","decision_node":"n","attempts":1}`
	other := strings.Replace(string(good), `"id":0`, `"id":7`, 1)
	require.NotEqual(t, string(good), other)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.jsonl"), []byte(string(good)+"\n"+bad+"\n"+other+"\n"), 0o600))
	code, stdout, stderr := sluice(t, dir, "dlq", "redrive", "--amqp", b.url, "--queue", q, "p.jsonl")
	assert.Equal(t, 1, code, stdout+stderr)
	assert.Contains(t, stderr, "p.jsonl:2: not re-driven: ")
	assert.Contains(t, stdout, "2 of 3 envelopes re-driven")
	// Again: the two are in the ledger, the bad one is reported again.
	code, stdout, stderr = sluice(t, dir, "dlq", "redrive", "--amqp", b.url, "--queue", q, "p.jsonl")
	assert.Equal(t, 1, code, stdout+stderr)
	assert.Contains(t, stderr, "p.jsonl:2: not re-driven: ")
	assert.Contains(t, stdout, "0 of 3 envelopes re-driven to queue")
	assert.Contains(t, stdout, "2 were already")
	assert.Len(t, b.drain(t, q), 2, "the letters 1 and 3, once each")
}

// letterLine is a dead letter of item (JSON) of type itemType.
func letterLine(item, itemType string, id int) string {
	return fmt.Sprintf(`{"item":%s,"item_type":%q,"error":"x%d","origin_node":"n","decision_node":"n","attempts":1}`, item, itemType, id)
}

// A rabbitmq.Message letter whose property or header name is longer than
// AMQP's 255 bytes decodes, but no publish carries it: it is reported and
// left while reading, the dry run does not list it, and the letters after
// it are sent. The publish met it and stopped the redrive there on every
// run (third review). Real RabbitMQ.
func TestRedriveLeavesALetterAMQPCannotCarry(t *testing.T) {
	const msgType = "github.com/sluicehq/sluice/connector/rabbitmq.Message"
	long := strings.Repeat("m", 256)
	for _, bad := range []string{
		`{"body":"aGk=","message_id":"` + long + `"}`,
		`{"body":"aGk=","content_type":"` + long + `"}`,
		`{"body":"aGk=","headers":{"` + long + `":"v"}}`,
	} {
		b := newBroker(t)
		q := b.queue(t)
		dir := t.TempDir()
		lines := letterLine(`{"id":1}`, "main_test.item", 1) + "\n" + letterLine(bad, msgType, 2) + "\n" + letterLine(`{"id":3}`, "main_test.item", 3) + "\n"
		require.NoError(t, os.WriteFile(filepath.Join(dir, "p.jsonl"), []byte(lines), 0o600))
		code, stdout, stderr := sluice(t, dir, "dlq", "redrive", "--amqp", b.url, "--queue", q, "--dry-run", "p.jsonl")
		assert.Equal(t, 1, code, "%s: %s", bad, stderr)
		assert.Equal(t, 2, strings.Count(stdout, "would re-drive "), "%s: %s", bad, stdout)
		assert.Contains(t, stdout, "2 of 3 envelopes would be re-driven")
		assert.Contains(t, stdout, "; 1 not re-driven (reported above)")
		for range 2 {
			code, stdout, stderr = sluice(t, dir, "dlq", "redrive", "--amqp", b.url, "--queue", q, "p.jsonl")
			assert.Equal(t, 1, code, "%s: %s", bad, stdout+stderr)
			assert.Contains(t, stderr, "p.jsonl:2: not re-driven: ", bad)
			assert.Contains(t, stderr, "more than AMQP's 255", bad)
		}
		assert.Len(t, b.drain(t, q), 2, "%s: letters 1 and 3, once each", bad)
	}
}

// The count line's parts add up to its total: the letters reported and
// left were missing from it (third review).
func TestRedriveCountLineAddsUp(t *testing.T) {
	dir := t.TempDir()
	writeLetters(t, dir, "l.jsonl", 2)
	raw, err := os.ReadFile(filepath.Join(dir, "l.jsonl"))
	require.NoError(t, err)
	bad := letterLine(`123`, "github.com/sluicehq/sluice/connector/rabbitmq.Message", 9)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.jsonl"), append(raw, []byte(bad+"\n")...), 0o600))
	code, stdout, stderr := sluice(t, dir, "dlq", "redrive", "--amqp", "amqp://127.0.0.1:1/", "--queue", "q", "--dry-run", "p.jsonl", "p.jsonl")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stdout, "2 of 6 envelopes would be re-driven to queue \"q\"; 0 were already (ledger p.jsonl.redriven); 1 not re-driven (reported above); 3 repeated a line read before")
}
