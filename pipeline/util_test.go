package pipeline_test

import "runtime"

// runtimeGosched lets other goroutines run while a test waits for
// something they do, without sleeping.
func runtimeGosched() { runtime.Gosched() }
