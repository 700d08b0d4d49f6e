//go:build unix && !linux

package file

// holdPipe returns path: without Linux's O_PATH and /proc, the pipe is
// opened by its path, and an open waiting for the writer of a pipe
// renamed or removed meanwhile is woken only by a writer of the pipe.
func holdPipe(path string) (name string, release func()) { return path, func() {} }
