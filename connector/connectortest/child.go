package connectortest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// The consumer process of the SIGKILL case is the connector's test binary
// run again with childEnv set, configured by these variables; it talks to
// the test through lines on its stdout.
const (
	childEnv      = "SLUICE_CONNECTORTEST_CHILD"
	childQueue    = "SLUICE_CONNECTORTEST_QUEUE"
	childPrefetch = "SLUICE_CONNECTORTEST_PREFETCH"
	childOut      = "SLUICE_CONNECTORTEST_OUT"   // the file the store appends keys to
	childStall    = "SLUICE_CONNECTORTEST_STALL" // hang after storing this many keys, printing "stalled"
)

// ChildMain makes the test binary the consumer process of the SIGKILL
// case when the suite started it as one: it consumes with a source that h
// builds, and exits. Otherwise it returns at once. Call it first in the
// connector test's TestMain, with a harness that needs no test (the
// process runs none): it uses only h's NewSource and Message.
func ChildMain[M any](h Harness[M]) {
	if os.Getenv(childEnv) == "" {
		return
	}
	run := child[M]
	if m := os.Getenv(childMode); m == crashMode || m == stormMode {
		run = crashChild[M]
	}
	if err := run(h); err != nil {
		fmt.Fprintln(os.Stderr, "connectortest: consumer process:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// child consumes the queue into a store that appends each key to a file
// and hangs, acking nothing more, once it stored the number of keys it was
// told to.
func child[M any](h Harness[M]) error {
	stall, _ := strconv.Atoi(os.Getenv(childStall))
	prefetch, _ := strconv.Atoi(os.Getenv(childPrefetch))
	// O_APPEND: each key is one write(2) at the end of the file, which the
	// kernel keeps even when the process is killed right after.
	f, err := os.OpenFile(os.Getenv(childOut), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	cons, err := h.NewSource(SourceConfig{Queue: os.Getenv(childQueue), Prefetch: prefetch})
	if err != nil {
		return err
	}
	written := 0
	b := pipeline.New("connectortest-child")
	pipeline.Sink(b, "append", pipeline.Source(b, "consume", cons.Source), node.SinkFunc[M](func(ctx context.Context, m M) error {
		if _, err := f.WriteString(h.Message(m).Key + "\n"); err != nil {
			return err
		}
		if written++; written == stall {
			fmt.Println("stalled")
			<-ctx.Done() // hang, acking nothing more, until killed
		}
		return nil
	}))
	p, err := b.Build()
	if err != nil {
		return err
	}
	_, err = p.Run(context.Background())
	return err
}

// killedConsumer kills a consumer process with SIGKILL while it holds
// unacked messages, one of them already stored, and lets a source in the
// test's process finish the queue. Every message is stored at least once;
// the one stored but never acked is stored again, and at most a prefetch of
// them are: which is why sinks fed by a broker must be idempotent.
func killedConsumer[M any](t testing.TB, h Harness[M]) {
	ctx := caseContext(t)
	cfg := SourceConfig{Queue: queueName(t), Prefetch: 50}
	h.CreateQueue(t, cfg)
	const n, stallAfter = 3000, 1000
	want := keys(n)
	h.Publish(t, cfg.Queue, messages(want...)...)
	out := filepath.Join(t.TempDir(), "keys")

	proc := startChild(t, map[string]string{
		childQueue: cfg.Queue, childPrefetch: strconv.Itoa(cfg.Prefetch), childOut: out, childStall: strconv.Itoa(stallAfter),
	})
	proc.expect(ctx, t, "stalled")
	require.NoError(t, proc.cmd.Process.Signal(syscall.SIGKILL))
	var exit *exec.ExitError
	require.ErrorAs(t, proc.wait(ctx), &exit)
	assert.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal())
	first := readKeys(t, out)
	require.Len(t, first, stallAfter, "the process stored %d keys before it hung", stallAfter)

	s := newSeen()
	for k, c := range first {
		for range c {
			s.add(k)
		}
	}
	c := consumption[M]{h: h, cfg: cfg, store: func(_ context.Context, p *pipeline.Pipeline, m Message) error {
		if s.add(m.Key) == n {
			p.Drain()
		}
		return nil
	}}
	_, err := c.build(t).Run(ctx)
	require.NoError(t, err)
	// The messages the killed process held come back only once the broker
	// sees they will not be acked: at once on RabbitMQ, after the AckWait
	// on NATS, which a quick run may end before. Runs again, each draining
	// at its first message, take them as a restarted job would: a batch or
	// so each, so up to twenty (five left 18 of them unacked once, on a
	// loaded machine).
	for range 20 {
		if h.Pending(t, cfg.Queue) == 0 {
			break
		}
		_, err := c.build(t).Run(ctx)
		require.NoError(t, err)
	}
	counts := s.snapshot()
	require.Len(t, counts, n, "no message is lost")
	dups := 0
	for _, k := range want {
		dups += counts[k] - 1
	}
	assert.GreaterOrEqual(t, dups, 1, "the message the killed process stored but never acked was delivered again")
	assert.LessOrEqual(t, dups, cfg.Prefetch, "only unacked messages, at most the prefetch, are delivered twice")
	requirePending(t, h, cfg.Queue, 0, "every message was acked")
}

// A childProc is a running consumer process.
type childProc struct {
	cmd   *exec.Cmd
	lines chan string // its stdout, closed at its end
	read  sync.WaitGroup

	once sync.Once
	err  error
}

// startChild runs the test binary as a consumer process with env added;
// it is killed when t ends, if it still runs.
func startChild(t testing.TB, env map[string]string) *childProc {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &childProc{cmd: cmd, lines: make(chan string, 64)}
	c.read.Go(func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = c.wait(context.Background())
	})
	return c
}

// expect reads the child's stdout until the line want, and fails the test
// when the child ends first or ctx is done.
func (c *childProc) expect(ctx context.Context, t testing.TB, want string) {
	for {
		select {
		case line, ok := <-c.lines:
			require.True(t, ok, "connectortest: the consumer process ended before printing %q: "+
				"does the test's TestMain call connectortest.ChildMain first?", want)
			if line == want {
				return
			}
		case <-ctx.Done():
			require.FailNow(t, "timed out", "waiting for the consumer process to print %q: %v", want, ctx.Err())
		}
	}
}

// wait waits for the child to end, draining its stdout, and returns its
// exit error. When ctx is done first it kills the child.
func (c *childProc) wait(ctx context.Context) error {
	c.once.Do(func() {
		stop := context.AfterFunc(ctx, func() { _ = c.cmd.Process.Kill() })
		defer stop()
		for range c.lines {
		}
		c.read.Wait()
		c.err = c.cmd.Wait()
	})
	return c.err
}

// readKeys returns the keys in a child's output file and how often each
// is there.
func readKeys(t testing.TB, path string) map[string]int {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	counts := map[string]int{}
	for _, k := range strings.Fields(string(b)) {
		counts[k]++
	}
	return counts
}
