package kafka_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/connector/kafka"
	"github.com/sluicehq/sluice/node"
)

// refuseEmitter is a hookEmitter whose emit of the record of value refuse
// fails.
type refuseEmitter struct {
	hookEmitter
	refuse string
}

func (e *refuseEmitter) EmitTracked(ctx context.Context, m kafka.Message, done func(node.Outcome)) error {
	if string(m.Value) == e.refuse {
		return errors.New(e.refuse + " refused")
	}
	return e.hookEmitter.EmitTracked(ctx, m, done)
}

// After a commit answered UNKNOWN_SERVER_ERROR and found stored, a Run
// fails mid-epoch (an emit refused); Close aborts that epoch and closes
// the client. It does not set the closing client to the group's offsets:
// Close succeeds though those offsets cannot be read then, and the
// epoch counts aborted.
func TestExactlyOnceCloseAfterAStoredUnconfirmedCommitAsksNothing(t *testing.T) {
	env := takeoverSetup(t, 3)
	hit := answerFirstCommitUnknown(t, env.c, true)
	var failFetch atomic.Bool
	env.c.ControlKey(int16(kmsg.OffsetFetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		env.c.KeepControl()
		if !failFetch.Load() {
			return nil, nil, false
		}
		return refusedOffsetFetch(req), nil, true
	})
	src := env.eo.Source()
	require.NoError(t, src.Open(testContext(t)))
	em := &refuseEmitter{hookEmitter: hookEmitter{sink: env.eo.Sink()}, refuse: "v4"}
	filled := false
	err := env.runTicking(t, testContext(t), src, em, func(int) {
		if filled {
			return
		}
		select {
		case <-hit:
			if env.a.committed(env.in, env.in)[0] == 3 {
				fillInputFrom(t, env.c.ListenAddrs(), env.in, 3, 6)
				filled = true
			}
		default:
		}
	})
	t.Logf("run: %v; commits %d aborts %d unknowns %d", err, src.Commits(), src.Aborts(), src.Unknowns())
	require.ErrorContains(t, err, "v4 refused")
	failFetch.Store(true)
	before := src.Aborts()
	cerr := src.Close(context.Background())
	t.Logf("close: %v; commits %d aborts %d unknowns %d", cerr, src.Commits(), src.Aborts(), src.Unknowns())
	assert.NoError(t, cerr, "the epoch aborted, and the client is closed after it: nothing to set")
	assert.Equal(t, before+1, src.Aborts(), "the epoch the emit failed in, ended by Close")
	assert.Zero(t, src.Unknowns())
}

// refusedOffsetFetch answers req GROUP_AUTHORIZATION_FAILED: the group's
// offsets cannot be read.
func refusedOffsetFetch(req kmsg.Request) kmsg.Response {
	r := req.(*kmsg.OffsetFetchRequest)
	resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
	resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
	for _, g := range r.Groups {
		rg := kmsg.NewOffsetFetchResponseGroup()
		rg.Group = g.Group
		rg.ErrorCode = kerr.GroupAuthorizationFailed.Code
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}
