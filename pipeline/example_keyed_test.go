package pipeline_test

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// Keyed applies each account's events one at a time, in order, while
// different accounts are applied in parallel: a balance never sees a
// withdrawal before the deposit that came first.
func ExampleKeyed() {
	type event struct {
		account string
		amount  int
	}
	b := pipeline.New("ledger")
	events := pipeline.Source(b, "events", pipelinetest.NewSliceSource(
		event{"alice", +100}, event{"bob", +50}, event{"alice", -80},
		event{"bob", -50}, event{"alice", +5}, event{"carol", +1},
	))
	var mu sync.Mutex
	balance := map[string]int{}
	var trail []string
	pipeline.ForEach(b, "apply", events, func(_ context.Context, e event) error {
		mu.Lock()
		defer mu.Unlock()
		balance[e.account] += e.amount
		if balance[e.account] < 0 {
			return fmt.Errorf("%s overdrawn", e.account)
		}
		trail = append(trail, fmt.Sprintf("%s=%d", e.account, balance[e.account]))
		return nil
	}, pipeline.Keyed(4, func(e event) string { return e.account }))
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := p.Run(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	for _, who := range []string{"alice", "bob", "carol"} {
		var steps []string
		for _, s := range trail {
			if strings.HasPrefix(s, who+"=") {
				steps = append(steps, s)
			}
		}
		fmt.Println(strings.Join(steps, " "))
	}
	// Output:
	// alice=100 alice=20 alice=25
	// bob=50 bob=0
	// carol=1
}
