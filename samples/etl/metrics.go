package main

import (
	"io"

	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
)

// serveMetrics would serve Prometheus metrics on addr; the plug-in is not
// wired in yet.
func serveMetrics(addr string, _ io.Writer, _ *[]observer.Observer) (stop func(), err error) {
	return func() {}, nil
}

func bindMetrics(*pipeline.Pipeline) {}
