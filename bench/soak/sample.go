package main

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"time"
)

// read takes one sample of this process, at since the start.
func read(since time.Duration) sample {
	s := sample{at: since, goroutines: float64(runtime.NumGoroutine())}
	m := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(m)
	if m[0].Value.Kind() == metrics.KindUint64 {
		s.heap = float64(m[0].Value.Uint64())
	}
	s.rss = rss()
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		s.files = float64(len(fds))
	}
	return s
}

// rss returns the resident set size from /proc/self/status; 0 where
// there is none.
func rss() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) >= 2 && string(f[0]) == "VmRSS:" {
			kb, err := strconv.ParseFloat(string(f[1]), 64)
			if err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}
