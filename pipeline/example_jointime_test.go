package pipeline_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// JoinEventTime pairs each order with its payment when their own times
// are less than ten minutes apart, whatever order the two inputs bring
// them in: order 2's payment came 30 minutes after it, so it joins
// nothing (and is dropped on purpose, Filtered), while order 3's payment,
// read before order 3, still joins it. An item older than the watermark
// (two hours behind the latest time each input brought, the lower of the
// two) would be late, and come out of the JoinLate streams; none is here.
func ExampleJoinEventTime() {
	type order struct {
		id int
		at string
	}
	type payment struct {
		order int
		at    string
	}
	clock := func(s string) time.Time {
		t, _ := time.Parse(time.TimeOnly, s)
		return t
	}
	b := pipeline.New("paid")
	orders := pipeline.Source(b, "orders", pipelinetest.NewSliceSource(
		order{1, "10:00:00"}, order{2, "10:30:00"}, order{3, "10:50:00"}))
	payments := pipeline.Source(b, "payments", pipelinetest.NewSliceSource(
		payment{3, "10:52:00"}, payment{1, "10:04:00"}, payment{2, "11:00:00"}))
	var lateOrders pipeline.Stream[order]
	var latePayments pipeline.Stream[payment]
	paid := pipeline.Join(b, "paid", orders, payments,
		func(o order) int { return o.id }, func(p payment) int { return p.order },
		10*time.Minute, func(o order, p payment) string { return fmt.Sprintf("order %d at %s, paid at %s", o.id, o.at, p.at) },
		pipeline.JoinEventTime(func(o order) time.Time { return clock(o.at) }, func(p payment) time.Time { return clock(p.at) },
			2*time.Hour, 0),
		pipeline.JoinLate(&lateOrders, &latePayments))
	pipeline.ForEach(b, "print", paid, func(_ context.Context, s string) error {
		fmt.Println(s)
		return nil
	})
	pipeline.ForEach(b, "late orders", lateOrders, func(_ context.Context, o order) error {
		fmt.Println("late: order", o.id)
		return nil
	})
	pipeline.ForEach(b, "late payments", latePayments, func(_ context.Context, p payment) error {
		fmt.Println("late: payment of order", p.order)
		return nil
	})
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := p.Run(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	n, _ := res.Node("paid")
	fmt.Println("late:", n.Late)
	// Unordered output:
	// order 1 at 10:00:00, paid at 10:04:00
	// order 3 at 10:50:00, paid at 10:52:00
	// late: 0
}
