package kafka_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/pipeline"
)

// The process of the exactly-once SIGKILL test is this test binary run
// again with eoChildEnv set to "brokers;input;output;group;killAt": it
// consumes input into output, and kills itself with SIGKILL right after
// its killAt-th output was produced (in the transaction, not committed);
// with killAt 0 it runs until it is killed.
const eoChildEnv = "SLUICE_TEST_KAFKA_EO_CHILD"

func init() {
	spec := os.Getenv(eoChildEnv)
	if spec == "" {
		return
	}
	if err := eoChild(spec); err != nil {
		fmt.Fprintln(os.Stderr, "exactly-once child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// killingSink produces with the ExactlyOnce's sink and SIGKILLs the
// process once killAt outputs were produced.
type killingSink struct {
	*kafka.TransactSink[kafka.Message]
	killAt   int64
	produced atomic.Int64
}

func (k *killingSink) Write(ctx context.Context, m kafka.Message) error {
	if err := k.TransactSink.Write(ctx, m); err != nil {
		return err
	}
	if k.produced.Add(1) == k.killAt {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal ends the process
	}
	return nil
}

func eoChild(spec string) error {
	f := strings.Split(spec, ";")
	if len(f) != 5 {
		return fmt.Errorf("bad spec %q", spec)
	}
	killAt, err := strconv.ParseInt(f[4], 10, 64)
	if err != nil {
		return err
	}
	// One process at a time, restarted with the same ids: the
	// TransactionalID fences the dead one's transaction, the InstanceID
	// takes its place in the group at once.
	eo, err := kafka.NewExactlyOnce(kafka.ExactlyOnceConfig[kafka.Message]{Brokers: strings.Split(f[0], ","),
		Topic: f[1], Output: f[2], Group: f[3], TransactionalID: f[3] + "-txn", InstanceID: f[3] + "-member",
		Record: echoRecord, CommitInterval: 20 * time.Millisecond, MaxInFlight: 16})
	if err != nil {
		return err
	}
	b := pipeline.New("exactly-child")
	in := pipeline.Source(b, "in", eo.Source())
	out := pipeline.Map(b, "apply", in, func(_ context.Context, m kafka.Message) (kafka.Message, error) { return m, nil },
		pipeline.Keyed(4, kafka.RecordKey))
	pipeline.Sink(b, "out", out, &killingSink{TransactSink: eo.Sink(), killAt: killAt}, pipeline.Parallel(4))
	p, err := b.Build()
	if err != nil {
		return err
	}
	_, err = p.Run(context.Background())
	return err
}

// A consume → produce process killed with SIGKILL between producing and
// committing, at several steps, and run again each time: a read_committed
// consumer of the output sees each input's output exactly once.
func TestExactlyOnceSIGKILL(t *testing.T) {
	t.Parallel()
	c := shared(t)
	addrs := c.ListenAddrs()
	in, out := pubName(t), pubName(t)
	createTopicOn(t, c, in, 3)
	createTopicOn(t, c, out, 3)
	const n = 90
	fillInput(t, addrs, in, n)
	spec := func(killAt int) string {
		return strings.Join([]string{strings.Join(addrs, ","), in, out, in, strconv.Itoa(killAt)}, ";")
	}
	start := func(killAt int) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), eoChildEnv+"="+spec(killAt))
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		return cmd
	}
	ctx := pubContext(t)
	for _, killAt := range []int{1, 7, 20, 33} {
		cmd := start(killAt)
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		select {
		case err := <-waited:
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "killed at %d", killAt)
			ws := exit.Sys().(syscall.WaitStatus)
			require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "killed at output %d: %v", killAt, err)
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			t.Fatalf("the process to be killed at output %d did not get there", killAt)
		}
	}
	assert.Greater(t, countTopic(t, addrs, out), int64(0), "the killed processes produced")

	// The last process finishes the input.
	cmd := start(0)
	a := newAdmin(t, c)
	waitFor(t, "the input committed", func() bool { return lagOf(t, a, in, in) == 0 })
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()

	checkOnce(t, readCommitted(t, addrs, out, n), n)
	uncommitted := readTopic(t, addrs, out, n, kgo.ReadUncommitted())
	t.Logf("%d outputs in the log, %d of them committed", len(uncommitted), n)
}
