package pipeline_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// EventTime puts each order in the hour of its own time, whenever it
// comes: the 10:50 order that comes after 11:05 still counts in 10:00's
// hour, as a correction (Update) within the allowed lateness, and the
// 09:15 order, too late for any window, comes out of the Late output.
func ExampleEventTime() {
	type order struct {
		at    string
		cents int
	}
	at := func(o order) time.Time {
		t, _ := time.Parse(time.TimeOnly, o.at)
		return t
	}
	b := pipeline.New("hourly")
	orders := pipeline.Source(b, "read", pipelinetest.NewSliceSource(
		order{"10:10:00", 100}, order{"10:40:00", 200}, order{"11:05:00", 50}, order{"10:50:00", 7}, order{"09:15:00", 1}))
	var late pipeline.Stream[order]
	hourly := pipeline.Aggregate(b, "per-hour", orders, func(order) string { return "all" },
		pipeline.TimeWindow(time.Hour), func() int { return 0 }, func(sum int, o order) int { return sum + o.cents },
		pipeline.EventTime(at, 0, time.Minute), pipeline.AllowedLateness(30*time.Minute), pipeline.Late(&late))
	pipeline.ForEach(b, "print", hourly, func(_ context.Context, w pipeline.Window[string, int]) error {
		fmt.Printf("%s: %d cents in %d orders (update: %v, partial: %v)\n", w.Start.Format("15:04"), w.Value, w.Count, w.Update, w.Partial)
		return nil
	})
	pipeline.ForEach(b, "late", late, func(_ context.Context, o order) error {
		fmt.Printf("late: the order of %s\n", o.at)
		return nil
	})
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := p.Run(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Unordered output:
	// 10:00: 300 cents in 2 orders (update: false, partial: false)
	// 10:00: 307 cents in 3 orders (update: true, partial: false)
	// late: the order of 09:15:00
	// 11:00: 50 cents in 1 orders (update: false, partial: true)
}
