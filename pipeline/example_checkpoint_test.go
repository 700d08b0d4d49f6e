package pipeline_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

// memCheckpoints is a checkpoint.Store in memory, enough for an example;
// checkpoint.OpenFile keeps positions across processes.
type memCheckpoints struct {
	mu  sync.Mutex
	pos map[string][]byte
}

func (m *memCheckpoints) Load(_ context.Context, pipe, src string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pos[pipe+"/"+src], nil
}

func (m *memCheckpoints) Save(_ context.Context, pipe, src string, pos []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pos[pipe+"/"+src] = append([]byte(nil), pos...)
	return nil
}

// rows emits its rows from where it resumed, each at the position just
// after it: the index of the next row, in decimal.
type rows struct {
	rows []string
	next int
}

func (r *rows) Resume(pos []byte) error {
	r.next = 0
	if pos != nil {
		n, err := strconv.Atoi(string(pos))
		if err != nil {
			return err
		}
		r.next = n
	}
	return nil
}

func (r *rows) Run(ctx context.Context, emit node.Emitter[string]) error {
	// next moves as items go out: a node restart calls Run again,
	// without Resume, and goes on after the last item emitted.
	for ; r.next < len(r.rows); r.next++ {
		if err := emit.EmitAt(ctx, r.rows[r.next], []byte(strconv.Itoa(r.next+1))); err != nil {
			return err
		}
	}
	return nil
}

// A pipeline with a checkpoint resumes where its last run settled: the
// second run reads only the rows appended since.
func ExampleWithCheckpoint() {
	store := &memCheckpoints{pos: map[string][]byte{}}
	src := &rows{rows: []string{"a", "b", "c"}}
	b := pipeline.New("import", pipeline.WithCheckpoint(store, time.Second))
	pipeline.Sink(b, "print", pipeline.Source(b, "read", src), node.SinkFunc[string](func(_ context.Context, row string) error {
		fmt.Println("row", row)
		return nil
	}))
	p, err := b.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := p.Run(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("saved %s\n", store.pos["import/read"])

	src.rows = append(src.rows, "d")
	if _, err := p.Run(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("saved %s\n", store.pos["import/read"])
	// Output:
	// row a
	// row b
	// row c
	// saved 3
	// row d
	// saved 4
}
