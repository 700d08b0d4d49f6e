package connectortest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// The consumer process of the crash case is the test binary run again
// with childEnv and childMode=crashMode set, configured by these
// variables.
const (
	childMode     = "SLUICE_CONNECTORTEST_MODE"
	crashMode     = "crash"
	childLedger   = "SLUICE_CONNECTORTEST_LEDGER"
	childMaxDeliv = "SLUICE_CONNECTORTEST_MAX_DELIVERIES"
	childDead     = "SLUICE_CONNECTORTEST_DEAD"    // the file dead-lettered keys and reasons go to
	childCrashes  = "SLUICE_CONNECTORTEST_CRASHES" // the file a crashing message's key goes to before it crashes
	childTotal    = "SLUICE_CONNECTORTEST_TOTAL"   // drain once this many keys are stored or dead-lettered
	childSweep    = "SLUICE_CONNECTORTEST_SWEEP"   // a sweep: drain once this many messages are taken
	// The poison storm's: the file each delivery of a good message to the
	// store goes to (before the idempotent store drops a key it has), and
	// the file each failed run goes to, a line each.
	childDelivered = "SLUICE_CONNECTORTEST_DELIVERED"
	childRuns      = "SLUICE_CONNECTORTEST_RUNS"
)

// The exit codes of a crashing consumer process: os.Exit(exitCrash) for a
// message whose key starts with "crash-exit", Go's own 2 for the
// unrecovered panic of a goroutine, for a key that starts with
// "crash-panic", and 128 + SIGKILL, as a shell reports it, for a key that
// starts with "crash-kill" (the process kills itself, as the OOM killer
// would).
const (
	exitCrash = 3
	exitPanic = 2
	exitKill  = 128 + int(syscall.SIGKILL)
)

// crashedConsumer publishes 600 good messages and three that end the
// consumer's process when they are stored (one calls os.Exit, one panics
// in a goroutine of its own, one has the process killed with SIGKILL),
// spread among them, with a prefetch of 16 and
// MaxDeliveries 1, and runs a consumer process with a crash ledger again
// after each crash until every message was stored or dead-lettered. Every
// good message is stored (by an idempotent store, in a file), none is
// dead-lettered, each crashing message is dead-lettered once with "crashed
// the consumer" in its reason after at most two crashes, and the queue
// ends empty.
func crashedConsumer[M any](t testing.TB, h Harness[M]) {
	ctx := caseContext(t)
	dir := t.TempDir()
	cfg := SourceConfig{Queue: queueName(t), Prefetch: 16, MaxDeliveries: 1, CrashLedger: filepath.Join(dir, "crash.ledger")}
	h.CreateQueue(t, cfg)
	good := keys(600)
	crashing := []string{"crash-exit-1", "crash-panic-2", "crash-kill-3"}
	all := slices.Clone(good)
	for i, k := range crashing {
		all = slices.Insert(all, 150*(i+1)+i, k)
	}
	h.Publish(t, cfg.Queue, messages(all...)...)

	stored, dead, crashed := filepath.Join(dir, "stored"), filepath.Join(dir, "dead"), filepath.Join(dir, "crashes")
	env := map[string]string{
		childMode: crashMode, childQueue: cfg.Queue, childPrefetch: strconv.Itoa(cfg.Prefetch),
		childMaxDeliv: strconv.Itoa(cfg.MaxDeliveries), childLedger: cfg.CrashLedger,
		childOut: stored, childDead: dead, childCrashes: crashed, childTotal: strconv.Itoa(len(all)),
	}
	crashes := 0
	maxRuns := 2*len(crashing) + 2
	for run := 1; ; run++ {
		if run > maxRuns {
			require.FailNow(t, "the queue is not done", "after %d consumer processes: %d stored, dead letters %v",
				maxRuns, len(readKeys(t, stored)), readDead(t, dead))
		}
		code, stderr := runCrashChild(ctx, t, env)
		if code == 0 {
			break
		}
		require.Contains(t, []int{exitCrash, exitPanic, exitKill}, code, "consumer process %d ended with %d:\n%s", run, code, stderr)
		crashes++
	}

	t.Logf("%d consumer processes crashed", crashes)
	got := readKeys(t, stored)
	assert.Len(t, got, len(good), "every good message is stored")
	for _, k := range good {
		assert.Equal(t, 1, got[k], "message %s is stored once", k)
	}
	letters := readDead(t, dead)
	var deadKeys []string
	for k, reasons := range letters {
		deadKeys = append(deadKeys, k)
		assert.Zero(t, got[k], "message %s is dead-lettered and stored", k)
		if assert.Len(t, reasons, 1, "message %s is dead-lettered once", k) {
			assert.Contains(t, reasons[0], "crashed the consumer", "the reason of %s", k)
		}
	}
	assert.ElementsMatch(t, crashing, deadKeys, "the crashing messages, and no neighbour, are dead-lettered")
	byKey := readKeys(t, crashed)
	n := 0
	for _, c := range byKey {
		n += c
	}
	assert.Equal(t, crashes, n, "each crash was a crashing message's")
	for k, n := range byKey {
		assert.Contains(t, crashing, k)
		assert.LessOrEqual(t, n, 2, "%s ends at most two processes: once among its neighbours, once alone", k)
	}
	// A consumer process drains once every key is done. A message that a
	// crashed process stored but did not settle can still wait behind that
	// point, unread: on Kafka, a partition whose records were all done before
	// the last process started is not read again before it drains. Each
	// crash leaves at most a prefetch of them; a sweep process takes exactly
	// what is left, stores nothing new (every key is done) and settles it.
	for sweep := 0; sweep < 2; sweep++ {
		left := h.Pending(t, cfg.Queue)
		if left == 0 {
			break
		}
		require.LessOrEqual(t, left, cfg.Prefetch*max(crashes, 1), "a crashed process leaves at most a prefetch unsettled")
		t.Logf("a sweep process takes the %d messages left unsettled", left)
		env[childSweep] = strconv.Itoa(left)
		code, stderr := runCrashChild(ctx, t, env)
		require.Zero(t, code, "the sweep process ended with %d:\n%s", code, stderr)
		assert.Len(t, readKeys(t, stored), len(good), "a sweep stores nothing new")
		assert.Len(t, readDead(t, dead), len(crashing), "a sweep dead-letters nothing new")
	}
	requirePending(t, h, cfg.Queue, 0, "nothing is left in the queue")
}

// runCrashChild runs one consumer process to its end and returns its exit
// code (128 + the signal when a signal ended it) and what it wrote to
// stderr.
func runCrashChild(ctx context.Context, t testing.TB, env map[string]string) (int, string) {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "the consumer process did not end in time:\n%s", stderr.String())
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), stderr.String()
		}
		return exit.ExitCode(), stderr.String()
	}
	require.NoError(t, err)
	return 0, stderr.String()
}

// readDead returns the reasons each key was dead-lettered with, from a
// consumer process's file of dead letters.
func readDead(t testing.TB, path string) map[string][]string {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	out := map[string][]string{}
	for line := range strings.Lines(string(b)) {
		k, reason, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
		out[k] = append(out[k], reason)
	}
	return out
}

// crashChild consumes the queue into an idempotent store in a file (a key
// already in it is not written again), dead-letters into another file,
// and crashes on a crashing message; it drains once every key is stored or
// dead-lettered. In the poison storm's mode a message whose key starts
// with "poison-" fails its run, and the process runs the pipeline again
// after each failed run, up to stormRuns runs.
func crashChild[M any](h Harness[M]) error {
	storm := os.Getenv(childMode) == stormMode
	prefetch, _ := strconv.Atoi(os.Getenv(childPrefetch))
	maxDeliveries, _ := strconv.Atoi(os.Getenv(childMaxDeliv))
	total, _ := strconv.Atoi(os.Getenv(childTotal))
	// sweep, when positive, is how many messages a sweep process takes
	// before it drains (every key is done already).
	sweep, _ := strconv.Atoi(os.Getenv(childSweep))
	taken := 0
	// done holds the keys stored or dead-lettered, stored those stored.
	done, stored := map[string]bool{}, map[string]bool{}
	for _, path := range []string{os.Getenv(childOut), os.Getenv(childDead)} {
		b, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		for line := range strings.Lines(string(b)) {
			k, _, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
			done[k] = true
			stored[k] = stored[k] || path == os.Getenv(childOut)
		}
	}
	// O_APPEND: each line is one write(2) at the end of the file, which
	// the kernel keeps when the process ends right after.
	open := func(path string) (*os.File, error) {
		return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	}
	out, err := open(os.Getenv(childOut))
	if err != nil {
		return err
	}
	defer out.Close()
	deadFile, err := open(os.Getenv(childDead))
	if err != nil {
		return err
	}
	defer deadFile.Close()
	crashFile, err := open(os.Getenv(childCrashes))
	if err != nil {
		return err
	}
	defer crashFile.Close()
	// In the storm's mode: every delivery of a good message, and every
	// failed run, a line each.
	var deliveredFile, runsFile *os.File
	if storm {
		if deliveredFile, err = open(os.Getenv(childDelivered)); err != nil {
			return err
		}
		defer deliveredFile.Close()
		if runsFile, err = open(os.Getenv(childRuns)); err != nil {
			return err
		}
		defer runsFile.Close()
	}

	cons, err := h.NewSource(SourceConfig{Queue: os.Getenv(childQueue), Prefetch: prefetch,
		MaxDeliveries: maxDeliveries, CrashLedger: os.Getenv(childLedger)})
	if err != nil {
		return err
	}
	var (
		mu sync.Mutex
		p  *pipeline.Pipeline
	)
	// record writes line for key, and drains once every key is stored or
	// dead-lettered. The store is idempotent: a key stored already is not
	// written again. Every dead letter is written, so that the case sees a
	// key dead-lettered twice, or after it was stored.
	record := func(f *os.File, key, line string, store bool) error {
		mu.Lock()
		defer mu.Unlock()
		if taken++; sweep > 0 && taken == sweep {
			p.Drain()
		}
		if store && stored[key] {
			return nil
		}
		if _, err := f.WriteString(line + "\n"); err != nil {
			return err
		}
		stored[key] = stored[key] || store
		if !done[key] {
			if done[key] = true; len(done) == total {
				p.Drain()
			}
		}
		return nil
	}
	var dead deadletter.Sink = deadletter.Func(func(_ context.Context, env deadletter.Envelope) error {
		key := "(not an item of the source)"
		if m, ok := env.Item.(M); ok {
			key = h.Message(m).Key
		}
		return record(deadFile, key, key+"\t"+strings.ReplaceAll(env.ErrText, "\n", " "), false)
	})
	if cons.DeadLetter != nil {
		dead = cons.DeadLetter(dead)
	}
	b := pipeline.New("connectortest-crash", pipeline.WithDeadLetter(dead))
	pipeline.Sink(b, "store", pipeline.Source(b, "consume", cons.Source), node.SinkFunc[M](func(ctx context.Context, m M) error {
		key := h.Message(m).Key
		if strings.HasPrefix(key, "crash-") {
			if _, err := crashFile.WriteString(key + "\n"); err != nil {
				return err
			}
		}
		switch {
		case storm && strings.HasPrefix(key, "poison-"):
			return resilience.MarkPermanent(fmt.Errorf("%w %s", errBad, key))
		case strings.HasPrefix(key, "crash-exit"):
			os.Exit(exitCrash)
		case strings.HasPrefix(key, "crash-kill"):
			if self, err := os.FindProcess(os.Getpid()); err == nil {
				_ = self.Kill() // SIGKILL
			}
			<-ctx.Done()
			return ctx.Err()
		case strings.HasPrefix(key, "crash-panic"):
			go func() { panic(fmt.Sprintf("connectortest: crashing message %s", key)) }()
			<-ctx.Done()
			return ctx.Err()
		case storm:
			if _, err := deliveredFile.WriteString(key + "\n"); err != nil {
				return err
			}
		}
		return record(out, key, key, true)
	}))
	p, err = b.Build()
	if err != nil {
		return err
	}
	mu.Lock()
	finished := len(done) == total
	mu.Unlock()
	if finished && sweep == 0 {
		return nil
	}
	if !storm {
		_, err = p.Run(context.Background())
		return err
	}
	// A poison message fails the run (its node's failure action is Fail),
	// and the program runs the pipeline again, as a supervisor would
	// start it again, until the queue is done.
	for run := 1; ; run++ {
		_, err = p.Run(context.Background())
		if err == nil || !errors.Is(err, errBad) || run == stormRuns {
			return err
		}
		if _, werr := fmt.Fprintf(runsFile, "run-%d\n", run); werr != nil {
			return werr
		}
		mu.Lock()
		fmt.Fprintf(os.Stderr, "run %d failed with %d of %d keys done: %v\n", run, len(done), total, err)
		finished := len(done) == total
		mu.Unlock()
		// The source may dead-letter the poison message as the failed
		// run ends: its drain came too late for that run, and the next
		// would wait for messages that are all done.
		if finished {
			return nil
		}
	}
}
