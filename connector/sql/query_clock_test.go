package sql_test

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicesql "github.com/sluicehq/sluice/connector/sql"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
)

// Finding 8 (fixed by pipeline.ClockSetter): issue 30 says a following source polls "at an interval on
// the pipeline's clock"; with QueryOptions.Clock unset it waits on the
// real clock even when the pipeline has pipeline.WithClock, so a test (or
// a program) that drives the pipeline's fake clock never sees a poll: an
// hour-long Follow waits an hour of wall time.
func TestQueryFollowWaitsOnThePipelinesClock(t *testing.T) {
	db := openSQLite(t)
	d := sluicesql.SQLite
	table := tableName(t, db, d)
	createOrders(t, db, d, table, 2)
	clock := clockwork.NewFakeClock()
	src := sluicesql.Query[order](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"id"}, Follow: time.Hour})
	items := make(chan order, 10)
	b := pipeline.New("follow", pipeline.WithClock(clock))
	pipeline.Sink(b, "collect", pipeline.Source(b, "query", src), node.SinkFunc[order](func(ctx context.Context, o order) error {
		items <- o
		return nil
	}))
	p, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	run := pipelinetest.Start(ctx, p)
	defer func() { cancel(); run.Wait() }()
	<-items
	<-items
	wait, stop := context.WithTimeout(context.Background(), 3*time.Second)
	defer stop()
	require.NoError(t, clock.BlockUntilContext(wait, 1), "the source waits for its next poll on the pipeline's clock")
	insertOrders(t, db, d, table, 3, 3)
	clock.Advance(time.Hour)
	select {
	case o := <-items:
		assert.Equal(t, int64(3), o.ID, "the poll the pipeline's clock woke reads the new row")
	case <-wait.Done():
		t.Fatal("no poll after the pipeline's clock moved an hour")
	}
}

// QueryOptions.Clock, when set, wins over the pipeline's.
func TestQueryFollowOwnClockWins(t *testing.T) {
	db := openSQLite(t)
	d := sluicesql.SQLite
	table := tableName(t, db, d)
	createOrders(t, db, d, table, 1)
	own, pipelines := clockwork.NewFakeClock(), clockwork.NewFakeClock()
	src := sluicesql.Query[order](db, d, sluicesql.QueryOptions{Table: table, Key: []string{"id"}, Follow: time.Hour, Clock: own})
	items := make(chan order, 10)
	b := pipeline.New("follow", pipeline.WithClock(pipelines))
	pipeline.Sink(b, "collect", pipeline.Source(b, "query", src), node.SinkFunc[order](func(ctx context.Context, o order) error {
		items <- o
		return nil
	}))
	p, err := b.Build()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	run := pipelinetest.Start(ctx, p)
	defer func() { cancel(); run.Wait() }()
	<-items
	wait, stop := context.WithTimeout(context.Background(), 3*time.Second)
	defer stop()
	require.NoError(t, own.BlockUntilContext(wait, 1), "the source waits on its own clock")
	insertOrders(t, db, d, table, 2, 2)
	own.Advance(time.Hour)
	select {
	case o := <-items:
		assert.Equal(t, int64(2), o.ID)
	case <-wait.Done():
		t.Fatal("no poll after the source's own clock moved an hour")
	}
}
