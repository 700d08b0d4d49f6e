package pipeline_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// Route sends each order to the warehouse of its region; Map and ForEach
// take plain functions, so the types are inferred.
func ExampleRoute() {
	regions := []string{"eu", "us"}
	b := pipeline.New("orders")
	orders := pipeline.Source(b, "read", pipelinetest.NewSliceSource("eu:1", "us:2", "eu:3", "us:4"))
	upper := pipeline.Map(b, "normalise", orders, func(_ context.Context, o string) (string, error) {
		return strings.ToUpper(o), nil
	})
	byRegion := pipeline.Route(b, "region", upper, len(regions), func(o string) int {
		if strings.HasPrefix(o, "US:") {
			return 1
		}
		return 0
	})
	for i, branch := range byRegion {
		// One worker per branch: each branch prints its orders in order.
		pipeline.ForEach(b, "ship-"+regions[i], branch, func(_ context.Context, o string) error {
			fmt.Println(regions[i], "ships", o)
			return nil
		})
	}
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
	eu, _ := res.Node("region[0]")
	us, _ := res.Node("region[1]")
	fmt.Println("eu:", eu.Out, "us:", us.Out)
	// Unordered output:
	// eu ships EU:1
	// eu ships EU:3
	// us ships US:2
	// us ships US:4
	// eu: 2 us: 2
}
