//go:build linux

package file

import (
	"strconv"
	"syscall"
)

// oPath is Linux's O_PATH, the same on every architecture Go supports
// there (the syscall package names it on some only).
const oPath = 0x200000

// holdPipe returns a name of the named pipe at path that names it however
// the path changes (a rename, a removal): /proc's name of a descriptor
// that holds the pipe without opening it for reading or writing, which
// release closes. Without /proc (or when the pipe is gone already) it
// returns path.
func holdPipe(path string) (name string, release func()) {
	fd, err := syscall.Open(path, oPath|syscall.O_CLOEXEC, 0)
	if err != nil {
		return path, func() {}
	}
	name = "/proc/self/fd/" + strconv.Itoa(fd)
	var st syscall.Stat_t
	if err := syscall.Stat(name, &st); err != nil {
		_ = syscall.Close(fd)
		return path, func() {}
	}
	return name, func() { _ = syscall.Close(fd) }
}
