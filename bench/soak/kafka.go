package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// brokerMain runs the kfake cluster of a soak in a process of its own, so
// that the records it keeps in memory are not counted against the soak's
// heap: it prints its address and runs until its standard input closes.
func brokerMain() error {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Println(c.ListenAddrs()[0])
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// A child is a process started from the soak's own binary.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *os.File
	out    *bufio.Scanner
	done   chan error
}

func startChild(args ...string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// A pipe of our own rather than StdoutPipe, whose reading end Wait
	// closes: the lines a killed child wrote are read to the end.
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = pw
	err = cmd.Start()
	_ = pw.Close()
	if err != nil {
		_ = pr.Close()
		return nil, err
	}
	return &child{cmd: cmd, stdin: in, stdout: pr, out: bufio.NewScanner(pr), done: make(chan error, 1)}, nil
}

// feed reads the child consumer's lines, calling deliver and dead with
// their ids, until its standard output ends, and closes the channel it
// returns then.
func (c *child) feed(deliver, dead func(int)) <-chan struct{} {
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer c.stdout.Close()
		for c.out.Scan() {
			kind, id, ok := strings.Cut(c.out.Text(), " ")
			if !ok {
				continue
			}
			n, err := strconv.Atoi(id)
			if err != nil {
				continue // a line cut by a SIGKILL
			}
			switch kind {
			case "ok":
				deliver(n)
			case "dead":
				dead(n)
			}
		}
	}()
	return read
}

// startBroker starts the broker process and returns its address.
func startBroker() (*child, string, error) {
	c, err := startChild("-broker")
	if err != nil {
		return nil, "", err
	}
	if !c.out.Scan() {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
		return nil, "", fmt.Errorf("broker: no address: %v", c.out.Err())
	}
	addr := strings.TrimSpace(c.out.Text())
	go func() { c.done <- c.cmd.Wait() }()
	return c, addr, nil
}

// stop closes the child's standard input and waits for it, killing it
// after grace.
func (c *child) stop(grace time.Duration) {
	_ = c.stdin.Close()
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// createTopic creates topic with n partitions unless it exists.
func createTopic(ctx context.Context, broker, topic string, n int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopics(ctx, n, 1, nil, topic)
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	for _, t := range resp {
		if t.Err != nil && !errors.Is(t.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", t.Topic, t.Err)
		}
	}
	return nil
}

// produce writes items 0, 1, 2, … to topic, perSecond of them a second,
// straight to the broker (the faults are on the consumers' side), until
// ctx ends; it returns how many the broker acknowledged. Each item is
// keyed by its id, so that the ids of a partition are in order.
func produce(ctx context.Context, broker, topic string, perSecond int) (int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	const tick = 100 * time.Millisecond
	per := max(1, perSecond/10)
	t := time.NewTicker(tick)
	defer t.Stop()
	n := 0
	for {
		select {
		case <-ctx.Done():
			return n, nil
		case <-t.C:
		}
		recs := make([]*kgo.Record, per)
		for i := range recs {
			v := strconv.Itoa(n + i)
			recs[i] = &kgo.Record{Key: []byte(v), Value: []byte(v)}
		}
		// A produce that fails is not retried with new records: its
		// outcome is unknown, so the soak stops rather than guess.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		err := cl.ProduceSync(pctx, recs...).FirstErr()
		cancel()
		if err != nil {
			return n, fmt.Errorf("produce items %d…%d: %w (outcome unknown)", n, n+per-1, err)
		}
		n += per
	}
}

// idOf reads the id a message carries; -1 for none.
func idOf(m kafka.Message) int {
	id, err := strconv.Atoi(string(m.Value))
	if err != nil {
		return -1
	}
	return id
}

// consumerRestarts is how many times running layer 2 starts a consumer's
// source again after a lost connection.
const consumerRestarts = 5

// consumerWindow is the most records a consumer's source holds polled and
// not committed: what a consumer lost without a commit may deliver again.
const consumerWindow = kafka.DefaultMaxInFlight

// consumer builds the broker pipeline: a kafka.Source in group, its
// connections dialled to via (the fault proxies), the flaky dependency,
// and a sink that calls deliver; dead-lettered items go to dead.
func consumer(via, topic, group string, fl *flaky, deliver, dead func(int)) (*kafka.Source, *pipeline.Pipeline, error) {
	src, err := kafka.NewSource(kafka.SourceConfig{
		Brokers: []string{via}, Topic: topic, Group: group,
		SessionTimeout: 6 * time.Second,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, via)
		},
	})
	if err != nil {
		return nil, nil, err
	}
	dlq := deadletter.Func(func(_ context.Context, env deadletter.Envelope) error {
		if m, ok := env.Item.(kafka.Message); ok {
			dead(idOf(m))
			return nil
		}
		return fmt.Errorf("dead letter of type %T", env.Item)
	})
	b := pipeline.New("soak-kafka", pipeline.WithDeadLetter(dlq))
	// A lost connection fails the source's Run; layer 2 runs it again
	// (the broker redelivers what was not committed), five times running
	// at most, the count starting over after 100 items.
	msgs := pipeline.Source(b, "consume", src, pipeline.NodeResilience(func(o *resilience.Options) {
		o.NodeRestart = resilience.NodeRestartOptions{MaxRestarts: consumerRestarts, Backoff: resilience.Constant(500 * time.Millisecond), ResetAfterItems: 100, MaxReplayWindow: 10_000}
	}))
	ids := pipeline.Map(b, "dependency", msgs, func(ctx context.Context, m kafka.Message) (int, error) {
		return fl.call(ctx, idOf(m))
	}, pipeline.Parallel(8), pipeline.NodeResilience(fl.retries))
	pipeline.Sink(b, "deliver", ids, node.SinkFunc[int](func(_ context.Context, id int) error {
		deliver(id)
		return nil
	}))
	p, err := b.Build()
	return src, p, err
}

// consumerMain is the child consumer: the broker pipeline, writing
// "ok ID" and "dead ID" lines to its standard output, one write each, so
// that a SIGKILL loses no line of an item whose offset was committed. It
// drains on SIGTERM or when its standard input closes.
func consumerMain(via, topic, group string, seed uint64) error {
	var mu sync.Mutex
	line := func(kind string, id int) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = fmt.Fprintf(os.Stdout, "%s %d\n", kind, id)
	}
	src, p, err := consumer(via, topic, group, newFlaky(seed), func(id int) { line("ok", id) }, func(id int) { line("dead", id) })
	if err != nil {
		return err
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		src.Stop()
	}()
	go func() {
		sig := make(chan os.Signal, 1)
		signalNotify(sig)
		<-sig
		src.Stop()
	}()
	_, err = p.Run(context.Background())
	return err
}
