package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/observer"
	sluiceprom "github.com/sluicehq/sluice/observer/prometheus"
)

// metrics serves the job's Prometheus metrics while it runs.
type metrics struct {
	c    *sluiceprom.Collector
	reg  *promclient.Registry
	srv  *http.Server
	addr string
	done chan error
}

// startMetrics listens on addr and serves /metrics; an empty addr serves
// nothing and returns nil.
func startMetrics(addr string, w io.Writer) (*metrics, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("etl: -metrics-addr: %w", err)
	}
	m := &metrics{c: sluiceprom.New(), reg: promclient.NewRegistry(), addr: ln.Addr().String(), done: make(chan error, 1)}
	if err := m.reg.Register(m.c); err != nil {
		ln.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		err := m.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		m.done <- err
	}()
	fmt.Fprintf(w, "metrics on http://%s/metrics\n", m.addr)
	return m, nil
}

// observer returns the observer the pipeline reports to.
func (m *metrics) observer() observer.Observer {
	if m == nil {
		return nil
	}
	return m.c
}

// stop shuts the server down and waits for it.
func (m *metrics) stop() error {
	if m == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return errors.Join(m.srv.Shutdown(ctx), <-m.done)
}
