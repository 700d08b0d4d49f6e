package checkpoint_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluicehq/sluice/checkpoint"
)

// A File keeps the positions of every pipeline and source of a process in
// one file; a process that opens it after a crash or a redeploy loads what
// the last one saved.
func ExampleOpenFile() {
	dir, err := os.MkdirTemp("", "checkpoint-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "positions.json")
	ctx := context.Background()

	f, err := checkpoint.OpenFile(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := f.Save(ctx, "orders", "read", []byte("offset=1024")); err != nil {
		fmt.Println(err)
	}
	f.Close()

	// The next run.
	f, err = checkpoint.OpenFile(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	pos, err := f.Load(ctx, "orders", "read")
	fmt.Printf("%s %v\n", pos, err)
	pos, err = f.Load(ctx, "invoices", "read")
	fmt.Println(pos == nil, err)
	// Output:
	// offset=1024 <nil>
	// true <nil>
}

// A Memory store keeps positions for the life of the process: for tests
// and examples.
func ExampleNewMemory() {
	store := checkpoint.NewMemory()
	ctx := context.Background()
	pos, _ := store.Load(ctx, "orders", "read")
	fmt.Println(pos == nil)
	_ = store.Save(ctx, "orders", "read", []byte("row=42"))
	pos, _ = store.Load(ctx, "orders", "read")
	fmt.Printf("%s\n", pos)
	// Output:
	// true
	// row=42
}
