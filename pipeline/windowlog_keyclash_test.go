package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// Two exported fields under one JSON name: encoding/json keeps one at
// most (here the tagged Shard, under Region's name), so a key does not
// come back equal: Build refuses
// it where a window log is kept, as it does a key with an unexported
// field.
type clashKey struct {
	Region string
	Shard  string `json:"Region"`
}

func TestBuildRefusesAWindowKeyWithClashingJSONNames(t *testing.T) {
	t.Parallel()
	b := pipeline.New("wl", pipeline.WithClock(clockwork.NewFakeClock()), pipeline.WithCheckpoint(checkpoint.NewMemory(), time.Hour))
	in := pipeline.Source(b, "src", &logSource{})
	var late pipeline.Stream[ev]
	key := func(e ev) clashKey { return clashKey{Region: "eu", Shard: "a"} }
	pipeline.Sink(b, "out", pipeline.Aggregate(b, "sum", in, key, pipeline.TimeWindow(time.Minute), evZero, evSum, pipeline.EventTime(evAt, 0, 0), pipeline.Late(&late)),
		node.SinkFunc[pipeline.Window[clashKey, int]](func(context.Context, pipeline.Window[clashKey, int]) error { return nil }))
	pipeline.Sink(b, "late", late, node.SinkFunc[ev](func(context.Context, ev) error { return nil }))
	_, err := b.Build()
	require.Error(t, err, "a key type whose fields JSON drops does not come back equal")
	require.Contains(t, err.Error(), `fields Region and Shard have one JSON name, "Region"`)
}
