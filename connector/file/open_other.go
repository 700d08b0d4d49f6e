//go:build !unix

package file

import (
	"context"
	"os"
)

// openFile opens path for reading.
func openFile(_ context.Context, path string) (*os.File, error) {
	return os.Open(path)
}
