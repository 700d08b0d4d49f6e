package file_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/sluicehq/sluice/connector/file"
	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// A CSV file with a header: each record's fields are looked up by name,
// and a bad row goes to the dead-letter sink with its file, line and
// column instead of failing the run.
func ExampleCSV() {
	dir, err := os.MkdirTemp("", "sluice-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "orders.csv")
	data := "id,sku,qty\n1,apple,3\n2,pear\n3,plum,12\n"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		panic(err)
	}

	dlq := deadletter.NewMemory(10)
	b := pipeline.New("orders", pipeline.WithDeadLetter(dlq))
	orders := pipeline.Source(b, "read", file.CSV(path, file.CSVOptions{Header: true}))
	pipeline.Sink(b, "print", orders, node.SinkFunc[file.Record](func(_ context.Context, r file.Record) error {
		qty, err := strconv.Atoi(r.Get("qty"))
		if err != nil {
			return err
		}
		fmt.Printf("line %d: %d × %s\n", r.Line, qty, r.Get("sku"))
		return nil
	}))
	p, err := b.Build()
	if err != nil {
		panic(err)
	}
	if _, err := p.Run(context.Background()); err != nil {
		panic(err)
	}
	for _, env := range dlq.Envelopes() {
		var row *file.RowError
		if errors.As(env.Err, &row) {
			fmt.Printf("dead letter %q: %s line %d, column %d: %v\n",
				env.Item, filepath.Base(row.Path), row.Line, row.Column, row.Err)
		}
	}
	// Output:
	// line 2: 3 × apple
	// line 4: 12 × plum
	// dead letter "2,pear": orders.csv line 3, column 1: wrong number of fields: 2 fields, want 3
}

// Each line is emitted with the position after it; Resume with one of
// them continues with the next line, as a run does after a crash when the
// pipeline keeps checkpoints (pipeline.WithCheckpoint).
func ExampleLines() {
	dir, err := os.MkdirTemp("", "sluice-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "words.txt")
	if err := os.WriteFile(path, []byte("sluice\nmoves\r\nwater"), 0o600); err != nil {
		panic(err)
	}

	src := file.Lines(path)
	var positions [][]byte
	print := emitter[string](func(line string, pos []byte) {
		fmt.Printf("%q\n", line)
		positions = append(positions, pos)
	})
	ctx := context.Background()
	if err := src.Run(ctx, print); err != nil {
		panic(err)
	}
	fmt.Println("size", src.Size())

	fmt.Println("resumed after the first line:")
	if err := src.Resume(positions[0]); err != nil {
		panic(err)
	}
	if err := src.Run(ctx, print); err != nil {
		panic(err)
	}
	// Output:
	// "sluice"
	// "moves"
	// "water"
	// size 3
	// resumed after the first line:
	// "moves"
	// "water"
}

type reading struct {
	Kind  string  `json:"kind"`
	Value float64 `json:"value"`
}

// Each line of a JSON Lines file decoded into a struct; blank lines are
// skipped.
func ExampleJSONL() {
	dir, err := os.MkdirTemp("", "sluice-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "events.jsonl")
	data := `{"kind":"temp","value":21.5}` + "\n\n" + `{"kind":"wind","value":7}` + "\n"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		panic(err)
	}

	src := file.JSONL[reading](path)
	err = src.Run(context.Background(), emitter[reading](func(e reading, _ []byte) {
		fmt.Printf("%s=%v\n", e.Kind, e.Value)
	}))
	if err != nil {
		panic(err)
	}
	// Output:
	// temp=21.5
	// wind=7
}

// emitter hands a source's items to a function, as a pipeline hands them
// to its next node.
type emitter[T any] func(item T, pos []byte)

func (e emitter[T]) Emit(_ context.Context, item T) error { e(item, nil); return nil }
func (e emitter[T]) EmitTracked(_ context.Context, item T, done func(node.Outcome)) error {
	e(item, nil)
	done(node.Delivered)
	return nil
}
func (e emitter[T]) EmitAt(_ context.Context, item T, pos []byte) error { e(item, pos); return nil }
