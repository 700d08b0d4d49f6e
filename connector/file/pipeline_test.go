package file_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/connector/file"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

func TestACSVSourceInAPipeline(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("id,qty\n")
	for i := range 500 {
		if i%100 == 7 {
			b.WriteString("bad\n")
			continue
		}
		b.WriteString(strconv.Itoa(i) + "," + strconv.Itoa(i%9) + "\n")
	}
	path := write(t, "orders.csv", b.String(), false)
	dlq := deadletter.NewMemory(100)
	pb := pipeline.New("orders", pipeline.WithDeadLetter(dlq))
	src := file.CSV(path, file.CSVOptions{Header: true})
	rows := pipeline.Source(pb, "read", src)
	qty := pipeline.Map(pb, "qty", rows, func(_ context.Context, r file.Record) (int, error) {
		return strconv.Atoi(r.Get("qty"))
	}, pipeline.Parallel(4))
	out := &pipelinetest.Collector[int]{}
	pipeline.Sink(pb, "write", qty, out)
	p, err := pb.Build()
	require.NoError(t, err)

	res, err := p.Run(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 495, out.Len())
	read, ok := res.Node("read")
	require.True(t, ok)
	assert.Equal(t, int64(495), read.Out)
	assert.Equal(t, int64(5), read.DeadLettered, "the source's dead letters count as its own")
	stats := p.Stats()
	require.Equal(t, "read", stats.Nodes[0].Node)
	assert.True(t, stats.Nodes[0].Sized)
	assert.Equal(t, int64(500), stats.Nodes[0].Size, "bad rows are counted in the size, not emitted")
	envs := dlq.Envelopes()
	require.Len(t, envs, 5)
	assert.Equal(t, "orders", envs[0].Pipeline)
	assert.Equal(t, "read", envs[0].OriginNode)
	assert.Equal(t, "read", envs[0].Source)
	assert.Contains(t, envs[0].ErrText, "orders.csv:9:1: wrong number of fields")

	// A second run, resumed at the start, reads the file again.
	require.NoError(t, src.Resume(nil))
	_, err = p.Run(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 990, out.Len())
	assert.Len(t, dlq.Envelopes(), 10)
}

func TestACSVSourceWithoutADeadLetterSinkFailsTheRunAtABadRow(t *testing.T) {
	t.Parallel()
	path := write(t, "orders.csv", "id,qty\n1,2\n3\n", false)
	pb := pipeline.New("orders")
	rows := pipeline.Source(pb, "read", file.CSV(path, file.CSVOptions{Header: true}))
	pipeline.Sink(pb, "write", rows, &pipelinetest.Collector[file.Record]{})
	p, err := pb.Build()
	require.NoError(t, err)
	_, err = p.Run(context.Background())
	require.ErrorIs(t, err, file.ErrBadRow)
	assert.Contains(t, err.Error(), "orders.csv:3:1")
}
