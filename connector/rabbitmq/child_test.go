package rabbitmq_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// The consumer processes of the kill and sharing tests are this test
// binary run again with childEnv set; they are configured by these
// variables and talk to the test through stdout lines and stdin.
const (
	childURL      = "SLUICE_RMQ_URL"
	childQueue    = "SLUICE_RMQ_QUEUE"
	childOut      = "SLUICE_RMQ_OUT"         // the file the sink appends ids to
	childTotal    = "SLUICE_RMQ_TOTAL"       // stop once the file holds this many ids; 0 never
	childStall    = "SLUICE_RMQ_STALL_AFTER" // hang after writing this many ids, printing "stalled"
	childPrefetch = "SLUICE_RMQ_PREFETCH"
	childGate     = "SLUICE_RMQ_GATE"   // after the first id print "first", wait for stdin to close
	childReport   = "SLUICE_RMQ_REPORT" // print "did <id>" for every id written
)

// runChild is the main function of a consumer process: a pipeline from a
// Source to a sink that appends each message id to a file, an idempotent
// store (a set, read back). SIGTERM stops it gracefully.
func runChild(string) int {
	if err := child(); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

func child() error {
	total, _ := strconv.Atoi(os.Getenv(childTotal))
	stall, _ := strconv.Atoi(os.Getenv(childStall))
	prefetch, _ := strconv.Atoi(os.Getenv(childPrefetch))
	gate, report := os.Getenv(childGate) == "1", os.Getenv(childReport) == "1"

	path := os.Getenv(childOut)
	seen := map[string]bool{}
	if old, err := os.ReadFile(path); err == nil {
		for _, id := range strings.Fields(string(old)) {
			seen[id] = true
		}
	}
	// O_APPEND: each id is one write(2) at the end of the file, which the
	// kernel keeps even when the process is killed right after.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()

	src, err := rabbitmq.NewSource(rabbitmq.SourceConfig{URL: os.Getenv(childURL), Queue: os.Getenv(childQueue), Prefetch: prefetch})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	go func() {
		select {
		case <-sigs:
			src.Stop()
		case <-ctx.Done():
		}
	}()

	written := 0
	sink := node.SinkFunc[rabbitmq.Message](func(ctx context.Context, m rabbitmq.Message) error {
		if _, err := f.WriteString(m.MessageID + "\n"); err != nil {
			return err
		}
		written++
		seen[m.MessageID] = true
		if report {
			fmt.Printf("did %s\n", m.MessageID)
		}
		if gate && written == 1 {
			fmt.Println("first")
			_, _ = io.Copy(io.Discard, os.Stdin)
		}
		if stall > 0 && written == stall {
			fmt.Println("stalled")
			<-ctx.Done() // hang, acking nothing more, until killed
		}
		if total > 0 && len(seen) == total {
			src.Stop()
		}
		return nil
	})
	b := pipeline.New("child")
	pipeline.Sink(b, "append", pipeline.Source(b, "consume", src), sink)
	p, err := b.Build()
	if err != nil {
		return err
	}
	_, err = p.Run(ctx)
	return err
}

// A childProc is a running consumer process.
type childProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // its stdout, closed at its end
	read  sync.WaitGroup

	once sync.Once
	err  error
}

// startChild runs this test binary as a consumer process with env added.
func startChild(t *testing.T, env map[string]string) *childProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=consume")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &childProc{cmd: cmd, stdin: stdin, lines: make(chan string, 1024)}
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
func (c *childProc) expect(ctx context.Context, t *testing.T, want string) {
	t.Helper()
	for {
		select {
		case line, ok := <-c.lines:
			require.True(t, ok, "the child ended before printing %q", want)
			if line == want {
				return
			}
		case <-ctx.Done():
			require.FailNow(t, "timed out", "waiting for %q: %v", want, ctx.Err())
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

// readIDs returns the ids in a child's output file and how often each is
// there.
func readIDs(t *testing.T, paths ...string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		for _, id := range strings.Fields(string(b)) {
			counts[id]++
		}
	}
	return counts
}
