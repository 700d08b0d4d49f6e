// Command quickstart is the program that docs/getting-started.md builds
// step by step: it reads words, counts their letters through a flaky
// service with retries, and writes the counts, dead-lettering what cannot
// be counted.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

// words is step 1: a source emits items.
func words(list ...string) node.Source[string] {
	return node.SourceFunc[string](func(ctx context.Context, out node.Emitter[string]) error {
		for _, w := range list {
			if err := out.Emit(ctx, w); err != nil {
				return err // the run is stopping
			}
		}
		return nil
	})
}

// Count is what the transform produces.
type Count struct {
	Word    string
	Letters int
}

// errBusy is a failure worth retrying.
var errBusy = resilience.MarkTransient(errors.New("letter service busy"))

// letters is step 2: a transform, here a "service" that is busy on every
// other call and refuses words with digits.
func letters() node.Transform[string, Count] {
	calls := 0
	return node.TransformFunc[string, Count](func(_ context.Context, w string) (Count, error) {
		calls++
		if calls%2 == 0 {
			return Count{}, errBusy
		}
		if strings.ContainsAny(w, "0123456789") {
			return Count{}, fmt.Errorf("%q is not a word", w) // permanent: not retried
		}
		return Count{w, len(w)}, nil
	})
}

func run(ctx context.Context, stdout io.Writer, dlqPath string) error {
	dlq, err := deadletter.OpenFile(dlqPath)
	if err != nil {
		return err
	}
	defer dlq.Close()

	p, err := build(stdout, dlq)
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, p.Plan())
	res, err := p.Run(ctx)
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, res)
	return nil
}

// build builds the pipeline of steps 3 to 5: it reads words, counts their
// letters and prints the counts to stdout, dead-lettering what it cannot
// count to dlq.
func build(stdout io.Writer, dlq deadletter.Sink) (*pipeline.Pipeline, error) {
	b := pipeline.New("letters",
		pipeline.WithDeadLetter(dlq),
		pipeline.WithResilience(func(o *resilience.Options) {
			o.ItemRetry.MaxRetries = 3
			o.ItemRetry.Backoff = resilience.Exponential(10 * time.Millisecond)
			o.OnItemFailure = resilience.DeadLetter
		}))
	in := pipeline.Source(b, "words", words("sluice", "gate", "r2d2", "water"))
	counts := pipeline.Transform(b, "count", in, letters())
	pipeline.Sink(b, "print", counts, node.SinkFunc[Count](func(_ context.Context, c Count) error {
		_, err := fmt.Fprintf(stdout, "%s has %d letters\n", c.Word, c.Letters)
		return err
	}))
	return b.Build()
}

func main() {
	if err := run(context.Background(), os.Stdout, "quickstart-dead-letters.jsonl"); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}
