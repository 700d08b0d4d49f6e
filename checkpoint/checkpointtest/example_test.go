package checkpointtest_test

import (
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/checkpoint/checkpointtest"
)

// Run checks a Store against the contract of checkpoint.Store, here a
// checkpoint file, opened again by WithReopen as a process after a crash
// would. Run needs a *testing.T, so this example is compiled but not run:
// the function below is a test of the store's package.
func ExampleRun() {
	testConformance := func(t *testing.T) {
		checkpointtest.Run(t, func(t *testing.T) checkpoint.Store {
			f, err := checkpoint.OpenFile(filepath.Join(t.TempDir(), "positions.json"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			return f
		}, checkpointtest.WithReopen(func(t *testing.T, s checkpoint.Store) checkpoint.Store {
			f := s.(*checkpoint.File)
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			g, err := checkpoint.OpenFile(f.Path())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { g.Close() })
			return g
		}))
	}
	_ = testConformance
}
