package e2e_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/connector/connectortest"
	"github.com/sluicehq/sluice/connector/rabbitmq"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/idempotency"
	"github.com/sluicehq/sluice/idempotency/sqlstore"
	"github.com/sluicehq/sluice/internal/servicetest"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// The consumer processes are this test binary run again with childEnv
// set, configured by the variables below; they report on stdout:
// "did <id>" for each row written, "dead <id>" for each dead letter
// stored, "stalled" when they hang on purpose, and "stats <written>
// <duplicates> <busy> <handed off>" when they end.
const (
	childEnv     = "SLUICE_E2E_CHILD"
	envURL       = "SLUICE_E2E_URL"
	envQueue     = "SLUICE_E2E_QUEUE"
	envDSN       = "SLUICE_E2E_DSN"
	envTable     = "SLUICE_E2E_TABLE" // prefix of the test's tables
	envStallAt   = "SLUICE_E2E_STALL_AT"
	poisonPrefix = "poison-"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		if err := consume(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// sourceConfig is the consumers' source: the retry topology with two
// tiers, long waits handed to the broker, and a poison guard.
func sourceConfig(url, queue string) rabbitmq.SourceConfig {
	return rabbitmq.SourceConfig{
		URL: url, Queue: queue, Prefetch: 16, Declare: &rabbitmq.QueueDeclaration{},
		Retry: rabbitmq.RetryTopology{Enabled: true, MaxRetry: 5,
			Delays: []time.Duration{50 * time.Millisecond, 200 * time.Millisecond}, HandOffAfter: 100 * time.Millisecond},
		MaxDeliveries: 5,
	}
}

// consume is a consumer process: messages from the queue, a flaky sink
// behind an idempotency guard on PostgreSQL, dead letters stored through a
// guard too. SIGTERM stops it gracefully.
func consume() error {
	stallAt, _ := strconv.ParseInt(os.Getenv(envStallAt), 10, 64)
	table := os.Getenv(envTable)
	db, err := sql.Open("pgx", os.Getenv(envDSN))
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable(table+"_idem"))
	if err != nil {
		return err
	}
	src, err := rabbitmq.NewSource(sourceConfig(os.Getenv(envURL), os.Getenv(envQueue)))
	if err != nil {
		return err
	}
	var attempts atomic.Int64
	flaky := node.SinkFunc[rabbitmq.Message](func(ctx context.Context, m rabbitmq.Message) error {
		if attempts.Add(1) == stallAt {
			// Hang holding the key's claim, before the write, until killed.
			fmt.Println("stalled")
			<-make(chan struct{})
		}
		switch r := mrand.IntN(100); {
		case r < 10:
			return resilience.MarkTransient(errors.New("db hiccup"))
		case r < 14:
			return resilience.RetryAfter(errors.New("db busy"), 150*time.Millisecond) // handed off
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO "+table+"_writes (id, pid) VALUES ($1, $2)", m.MessageID, os.Getpid()); err != nil {
			return err
		}
		fmt.Println("did", m.MessageID)
		return nil
	})
	key := func(m rabbitmq.Message) string { return m.MessageID }
	guard := idempotency.Sink(flaky, store, key, idempotency.WithLease(time.Second), idempotency.WithName("writes"))
	deadKey := func(env deadletter.Envelope) string {
		if m, ok := env.Item.(rabbitmq.Message); ok {
			return "dead:" + m.MessageID
		}
		return ""
	}
	deadGuard := idempotency.Sink(node.SinkFunc[deadletter.Envelope](func(ctx context.Context, env deadletter.Envelope) error {
		id := strings.TrimPrefix(deadKey(env), "dead:")
		if _, err := db.ExecContext(ctx, "INSERT INTO "+table+"_dead (id, pid, reason) VALUES ($1, $2, $3)", id, os.Getpid(), env.ErrText); err != nil {
			return err
		}
		fmt.Println("dead", id)
		return nil
	}), store, deadKey, idempotency.WithLease(time.Second), idempotency.WithName("dead letters"))

	b := pipeline.New("e2e", pipeline.WithDeadLetter(src.DeadLetter(deadletter.Func(deadGuard.Write))),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.OnItemFailure = resilience.DeadLetter
			o.ItemRetry.MaxRetries = 8
			o.ItemRetry.Backoff = resilience.Exponential(20 * time.Millisecond).WithMaxDelay(400 * time.Millisecond)
			o.NodeRestart.MaxRestarts = 100
			o.NodeRestart.Backoff = resilience.Constant(50 * time.Millisecond)
		}))
	handled := pipeline.Transform(b, "handle", pipeline.Source(b, "consume", src),
		node.TransformFunc[rabbitmq.Message, rabbitmq.Message](func(_ context.Context, m rabbitmq.Message) (rabbitmq.Message, error) {
			if strings.HasPrefix(m.MessageID, poisonPrefix) {
				return m, resilience.MarkPermanent(errors.New("unparseable order"))
			}
			return m, nil
		}))
	pipeline.Sink(b, "write", handled, guard)
	p, err := b.Build()
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	go func() {
		<-sigs
		src.Stop()
	}()
	res, err := p.Run(context.Background())
	st := guard.Stats()
	write, _ := res.Node("write")
	fmt.Println("stats", st.Written, st.Duplicates, st.Busy, write.HandedOff)
	return err
}

// A child is a running consumer process; its lines go to one channel
// shared by all children.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
}

type line struct {
	from *child
	text string
}

func start(t *testing.T, env map[string]string, lines chan<- line) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- line{c, sc.Text()}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
		_ = cmd.Wait()
	})
	return c
}

// Two consumer processes share one queue through the retry topology with
// tiers and hand-off, writing through an idempotency guard on PostgreSQL
// to a sink that fails now and then; the test cuts every broker connection
// twice and SIGKILLs one consumer while it holds a claim (a third takes its
// place). Every message is written exactly once in the table, each poison
// message is dead-lettered once, and nothing is left in the queue.
func TestConsumersWriteExactlyOnce(t *testing.T) {
	rmqURL := servicetest.RabbitMQ(t)
	dsn := servicetest.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	var rb [4]byte
	_, _ = rand.Read(rb[:])
	suffix := hex.EncodeToString(rb[:])
	table, queue := "sluice_e2e_"+suffix, "sluice-e2e."+suffix
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	defer db.Close()
	for _, ddl := range []string{
		"CREATE TABLE " + table + "_writes (id TEXT NOT NULL, pid INT NOT NULL)",
		"CREATE TABLE " + table + "_dead (id TEXT NOT NULL, pid INT NOT NULL, reason TEXT NOT NULL)",
	} {
		_, err := db.ExecContext(ctx, ddl)
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for _, tb := range []string{"_writes", "_dead", "_idem"} {
			_, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+table+tb)
		}
	})

	// Declare the queue and its topology, then publish.
	setup, err := rabbitmq.NewSource(sourceConfig(rmqURL, queue))
	require.NoError(t, err)
	setup.UseDeadLetter(deadletter.NewMemory(1), deadletter.Envelope{})
	require.NoError(t, setup.Open(ctx))
	require.NoError(t, setup.Close(ctx))
	conn, err := amqp.Dial(rmqURL)
	require.NoError(t, err)
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			for _, q := range []string{queue, queue + "_retry_50ms", queue + "_retry_200ms"} {
				_, _ = ch.QueueDelete(q, false, false, false)
			}
			for _, ex := range []string{queue + "_dlx", queue + "_retry"} {
				_ = ch.ExchangeDelete(ex, false, false)
			}
		}
		_ = conn.Close()
	})
	const good, poison = 1500, 3
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	var ids []string
	for i := range good {
		ids = append(ids, fmt.Sprintf("order-%05d", i))
		if i%500 == 250 {
			ids = append(ids, fmt.Sprintf("%s%d", poisonPrefix, i))
		}
	}
	for _, id := range ids {
		dc, err := ch.PublishWithDeferredConfirm("", queue, false, false, amqp.Publishing{Body: []byte(id), MessageId: id, DeliveryMode: amqp.Persistent})
		require.NoError(t, err)
		ok, err := dc.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}

	pxURL, err := url.Parse(rmqURL)
	require.NoError(t, err)
	px := connectortest.NewProxy(t, pxURL.Host)
	env := func(stallAt int) map[string]string {
		return map[string]string{envURL: px.URL(rmqURL), envQueue: queue, envDSN: dsn, envTable: table, envStallAt: strconv.Itoa(stallAt)}
	}
	lines := make(chan line, 4096)
	a := start(t, env(300), lines)
	others := []*child{start(t, env(0), lines)}

	written, dead := map[string]bool{}, map[string]bool{}
	cuts, killed := 0, false
	for len(written) < good || len(dead) < poison {
		select {
		case l := <-lines:
			switch f := strings.Fields(l.text); {
			case len(f) == 2 && f[0] == "did":
				written[f[1]] = true
			case len(f) == 2 && f[0] == "dead":
				dead[f[1]] = true
				if !strings.HasPrefix(f[1], poisonPrefix) {
					// A good message dead-lettered will never be written:
					// fail now, with the reason.
					ctx, cancel = context.WithTimeout(t.Context(), 0)
					defer cancel()
				}
			case l.text == "stalled" && l.from == a:
				require.NoError(t, a.cmd.Process.Signal(syscall.SIGKILL))
				killed = true
				others = append(others, start(t, env(0), lines))
			}
			if (cuts == 0 && len(written) >= 150) || (cuts == 1 && len(written) >= 900) {
				px.Cut()
				cuts++
			}
		case <-ctx.Done():
			rows, err := db.QueryContext(context.Background(), "SELECT id, reason FROM "+table+"_dead")
			if err == nil {
				for rows.Next() {
					var id, reason string
					_ = rows.Scan(&id, &reason)
					t.Logf("dead letter %s: %s", id, reason)
				}
				_ = rows.Close()
			}
			require.FailNow(t, "timed out", "written %d of %d, dead %d of %d", len(written), good, len(dead), poison)
		}
	}
	require.True(t, killed, "a consumer was killed while it held a claim")
	require.Equal(t, 2, cuts)
	var duplicates, busy, handedOff int64
	for _, c := range others {
		require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	}
	for _, c := range others {
	drain:
		for {
			select {
			case l := <-lines:
				var w, d, b, h int64
				if n, _ := fmt.Sscanf(l.text, "stats %d %d %d %d", &w, &d, &b, &h); n == 4 {
					duplicates, busy, handedOff = duplicates+d, busy+b, handedOff+h
				}
			case <-c.done:
				break drain
			}
		}
		require.NoError(t, c.cmd.Wait())
	}

	var rows, distinct int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*), count(DISTINCT id) FROM "+table+"_writes").Scan(&rows, &distinct))
	assert.Equal(t, good, distinct, "every message is written")
	assert.Equal(t, good, rows, "exactly once")
	require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*), count(DISTINCT id) FROM "+table+"_dead").Scan(&rows, &distinct))
	assert.Equal(t, poison, rows, "each poison message is dead-lettered once")
	assert.Equal(t, poison, distinct)
	info, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	require.NoError(t, err)
	assert.Zero(t, info.Messages, "nothing is left in the queue")
	assert.Positive(t, handedOff, "long waits went to the broker")
	t.Logf("the guard absorbed %d duplicates; %d writes found their key busy; %d waits were handed to the broker (the killed consumer's counts are lost with it)",
		duplicates, busy, handedOff)
}
