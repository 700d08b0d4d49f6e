//go:build unix

package file

import (
	"io/fs"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/internal/assert"
)

// An open of a pipe by /proc's name that fails (a pipe the user may not
// read) names the path the user gave.
func TestNamedAsNamesThePathGiven(t *testing.T) {
	err := namedAs(&fs.PathError{Op: "open", Path: "/proc/self/fd/7", Err: syscall.EACCES}, "in/orders.fifo")
	assert.ErrorIs(t, err, fs.ErrPermission)
	assert.Equal(t, "open in/orders.fifo: permission denied", err.Error())
	assert.Nil(t, namedAs(nil, "in/orders.fifo"))
}
