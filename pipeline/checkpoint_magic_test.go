package pipeline_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// bytesSource emits one item at the position pos, and records the
// position it resumed from.
type bytesSource struct {
	pos     []byte
	resumed []byte
}

func (s *bytesSource) Resume(pos []byte) error { s.resumed = pos; return nil }

func (s *bytesSource) Run(ctx context.Context, out node.Emitter[int]) error {
	return out.EmitAt(ctx, 1, s.pos)
}

// Positions are the source's opaque bytes: bytes that start as the
// engine's own position envelope does load back as they were saved, in a
// pipeline without a window log.
func TestCheckpointPositionThatLooksLikeAnEnvelopeResumes(t *testing.T) {
	t.Parallel()
	for _, pos := range []string{
		"\x00sluice.position\x00{opaque}",
		"\x00sluice.position\x00",
		"\x00sluice.position\x00\xff\xfe not json",
		"\x00sluice.position", // not the whole prefix: saved as it is
		"plain",
	} {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			store := newMemStore()
			for run := range 2 {
				b := newCkpt(store)
				s := &bytesSource{pos: []byte(pos)}
				pipeline.Sink(b, "sink", pipeline.Source(b, "src", s), node.SinkFunc[int](func(context.Context, int) error { return nil }))
				_, err := build(t, b).Run(context.Background())
				require.NoError(t, err, "run %d of %q", run, pos)
				if run == 1 {
					assert.Equal(t, pos, string(s.resumed), "resumed from the position saved")
				}
			}
			if pos == "plain" || pos == "\x00sluice.position" {
				assert.Equal(t, "src="+pos, store.last(), "saved as the source's own bytes")
			}
		})
	}
}
