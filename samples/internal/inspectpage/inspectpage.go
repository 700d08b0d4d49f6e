// Package inspectpage serves the live inspector page of one sample's
// pipeline (read-only), for the samples' -inspect-addr flag.
package inspectpage

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/observer/inspect"
)

// A Page serves the inspector of one pipeline on an address, once that
// pipeline is built; with an empty address it serves none.
type Page struct {
	// In is the inspector to add to the pipeline's observers (and its
	// DeadLetterSink to the dead-letter path); nil when the address is "".
	In *inspect.Inspector

	name  string
	addr  string
	w     io.Writer
	ready func(url string)
	srv   *http.Server
	done  chan error
}

// New returns the page of the sample called name (the prefix of the line
// that gives the page's URL on w), served on addr; ready, when not nil, is
// called with the URL once the page is served (tests).
func New(name, addr string, w io.Writer, ready func(url string)) *Page {
	p := &Page{name: name, addr: addr, w: w, ready: ready}
	if addr != "" {
		p.In = inspect.New()
	}
	return p
}

// Serve starts serving the page; call it after the pipeline's Build.
func (p *Page) Serve() error {
	if p.In == nil {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("-inspect-addr: %w", err)
	}
	p.srv = &http.Server{Handler: p.In, ReadHeaderTimeout: 10 * time.Second}
	p.done = make(chan error, 1)
	go func() { p.done <- p.srv.Serve(ln) }()
	url := "http://" + ln.Addr().String() + "/"
	fmt.Fprintf(p.w, "%s: inspector on %s\n", p.name, url)
	if p.ready != nil {
		p.ready(url)
	}
	return nil
}

// Stop ends the page's streams and its server.
func (p *Page) Stop() error {
	if p.srv == nil {
		return nil
	}
	p.In.Close()
	err := p.srv.Close()
	if serr := <-p.done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	p.srv = nil
	return err
}
