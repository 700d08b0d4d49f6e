package main

import (
	"bufio"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echo starts a server that writes back every line it reads, closed when
// t ends.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, msg string) {
	t.Helper()
	_, err := io.WriteString(c, msg+"\n")
	require.NoError(t, err)
	got, err := r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, msg+"\n", got)
}

func TestFrontPassesBytesInEveryMode(t *testing.T) {
	f, err := newFront(echo(t), 1)
	require.NoError(t, err)
	defer f.Close()
	c, err := net.Dial("tcp", f.Addr())
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	for _, mode := range []string{"", faultLatency, faultBandwidth, ""} {
		f.setMode(mode)
		roundTrip(t, c, r, "hello "+mode)
	}
}

// A silent link drops what is sent both ways and closes nothing; the end
// of the fault closes it, and a new connection is sound.
func TestFrontSilenceDropsThenEnds(t *testing.T) {
	f, err := newFront(echo(t), 1)
	require.NoError(t, err)
	defer f.Close()
	c, err := net.Dial("tcp", f.Addr())
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip(t, c, r, "before")

	end := f.silence()
	_, err = io.WriteString(c, "lost\n")
	require.NoError(t, err, "a silent link takes bytes")
	end()
	got, err := r.ReadString('\n')
	assert.Error(t, err, "the link is closed at the end of the fault")
	assert.Empty(t, got, "nothing sent on the silent link came back")

	c2, err := net.Dial("tcp", f.Addr())
	require.NoError(t, err)
	defer c2.Close()
	roundTrip(t, c2, bufio.NewReader(c2), "after")
}
