package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/node"
)

// A cancelEmitter settles each message Delivered and cancels the run.
type cancelEmitter struct{ cancel context.CancelFunc }

func (e cancelEmitter) Emit(context.Context, Message) error           { return nil }
func (e cancelEmitter) EmitAt(context.Context, Message, []byte) error { return nil }
func (e cancelEmitter) EmitTracked(_ context.Context, _ Message, done func(node.Outcome)) error {
	done(node.Delivered)
	e.cancel()
	return nil
}

// Ten node restarts (Run cancelled, Close, Open, Run) whose epochs all
// settled leave no epoch in old: with T = Message nothing prunes old but
// an end with records in flight, and a Close that kept every epoch it
// took grew it by one epoch, with its emitted records, per restart.
func TestExactlyOnceOldKeepsNoSettledEpoch(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in", "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "in", Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()
	eo, err := NewExactlyOnce(ExactlyOnceConfig[Message]{Brokers: c.ListenAddrs(), Topic: "in", Group: "g", TransactionalID: "tx",
		Output: "out", Record: func(m Message) (*kgo.Record, error) { return &kgo.Record{Value: m.Value}, nil },
		CommitInterval: time.Hour, MaxInFlight: 1, CloseTimeout: 2 * time.Second, SessionTimeout: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	src := eo.Source()
	const restarts = 10
	for i := 0; i < restarts; i++ {
		if err := src.Open(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_ = src.Run(ctx, cancelEmitter{cancel})
		cancel()
		if err := src.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	src.dmu.Lock()
	n := len(src.old)
	src.dmu.Unlock()
	t.Logf("commits %d aborts %d; len(old) after %d restarts: %d", src.Commits(), src.Aborts(), restarts, n)
	if n > 0 {
		t.Errorf("old holds %d ended, settled epochs after %d restarts: never pruned", n, restarts)
	}
}
