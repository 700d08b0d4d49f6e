//go:build unix

package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// A job whose source never runs out stops on a signal: the first drains
// it, so every item read is written; a second would cancel it. A program
// gives no signals, for os.Interrupt (Ctrl-C) and SIGTERM; here the job
// sends itself SIGUSR1 once it wrote its first item.
func ExampleRunUntilSignal() {
	var read, written atomic.Int64
	b := pipeline.New("ticks")
	ticks := pipeline.Source(b, "read", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		for i := 0; ; i++ {
			if err := out.Emit(ctx, i); err != nil {
				return err // drained: Emit refuses new items
			}
			read.Add(1)
		}
	}))
	pipeline.ForEach(b, "write", ticks, func(context.Context, int) error {
		if written.Add(1) == 1 {
			_ = syscall.Kill(syscall.Getpid(), syscall.SIGUSR1)
		}
		return nil
	})
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}

	_, err = pipeline.RunUntilSignal(context.Background(), p, syscall.SIGUSR1)
	switch {
	case errors.Is(err, pipeline.ErrDrained):
		fmt.Println(err)
		fmt.Println("every item read was written:", read.Load() == written.Load())
	case err != nil:
		fmt.Println("failed or cancelled:", err)
	}
	// Output:
	// pipeline: drained on user defined signal 1: every item taken in reached its outcome
	// every item read was written: true
}
