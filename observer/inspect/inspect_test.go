package inspect_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/assert"
	"github.com/sluicehq/sluice/internal/require"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/observer/inspect"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/pipeline/pipelinetest"
	"github.com/sluicehq/sluice/resilience"
)

// order is an item whose Email must not reach the page unless ShowItems.
type order struct {
	ID    int
	Email string
}

var errBad = resilience.MarkPermanent(errors.New("bad amount"))

// build makes a pipeline read -> check -> store whose check dead-letters
// the orders failing lists, through the inspector's sink when wrap.
// Each order check lets through is sent on passed when not nil.
func build(t *testing.T, in *inspect.Inspector, src node.Source[order], wrap bool, passed chan<- int, failing ...int) (*pipeline.Pipeline, *deadletter.Memory) {
	t.Helper()
	mem := deadletter.NewMemory(100_000)
	var sink deadletter.Sink = mem
	if wrap {
		sink = in.DeadLetterSink(mem)
	}
	bad := map[int]bool{}
	for _, id := range failing {
		bad[id] = true
	}
	b := pipeline.New("orders", pipeline.WithObserver(in), pipeline.WithDeadLetter(sink),
		pipeline.WithResilience(func(o *resilience.Options) { o.OnItemFailure = resilience.DeadLetter }))
	orders := pipeline.Source(b, "read", src, pipeline.SourceKey(func(o order) string { return fmt.Sprintf("order-%d", o.ID) }))
	checked := pipeline.Map(b, "check", orders, func(_ context.Context, o order) (order, error) {
		if bad[o.ID] {
			return o, errBad
		}
		if passed != nil {
			passed <- o.ID
		}
		return o, nil
	}, pipeline.Parallel(2))
	pipeline.Sink(b, "store", checked, &pipelinetest.Collector[order]{})
	p, err := b.Build()
	require.NoError(t, err)
	return p, mem
}

// newServer serves h until the test ends; the streams opened later close
// first, so that Close does not wait for them.
func newServer(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func orders(n int) *pipelinetest.SliceSource[order] {
	items := make([]order, n)
	for i := range items {
		items[i] = order{ID: i + 1, Email: fmt.Sprintf("person%d@example.com", i+1)}
	}
	return pipelinetest.NewSliceSource(items...)
}

// stream is one client of the event stream.
type stream struct {
	resp   *http.Response
	r      *bufio.Reader
	cancel context.CancelFunc
}

func openStream(t *testing.T, url string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/events", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	s := &stream{resp: resp, r: bufio.NewReader(resp.Body), cancel: cancel}
	t.Cleanup(s.close)
	return s
}

func (s *stream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// snap is the part of a snapshot the tests read.
type snap struct {
	Pipeline string `json:"pipeline"`
	RunID    string `json:"runId"`
	Running  bool   `json:"running"`
	Draining bool   `json:"draining"`
	Nodes    []struct {
		Name         string `json:"name"`
		In           int64  `json:"in"`
		Out          int64  `json:"out"`
		Failed       int64  `json:"failed"`
		DeadLettered int64  `json:"deadLettered"`
		Circuit      string `json:"circuit"`
	} `json:"nodes"`
	DeadLetters int `json:"deadLetters"`
	Listed      int `json:"listed"`
	Groups      []inspect.ReasonGroup
}

// next reads the stream's next event, which must be a stats event.
func (s *stream) next(t *testing.T) snap {
	t.Helper()
	var event, data string
	for {
		line, err := s.r.ReadString('\n')
		require.NoError(t, err)
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		case line == "":
			require.Equal(t, "stats", event)
			var sn snap
			require.NoError(t, json.Unmarshal([]byte(data), &sn))
			return sn
		}
	}
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if resp.StatusCode == http.StatusOK && v != nil {
		require.NoError(t, json.Unmarshal(body, v), string(body))
	}
	return resp.StatusCode
}

func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

func post(t *testing.T, url string, header bool) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, nil)
	require.NoError(t, err)
	if header {
		req.Header.Set(inspect.ControlHeader, "1")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func TestStreamSendsStatsAtOnceAndEveryInterval(t *testing.T) {
	clock := clockwork.NewFakeClock()
	in := inspect.New(inspect.WithClock(clock), inspect.WithInterval(time.Second))
	p, _ := build(t, in, orders(100), false, nil, 3, 50, 77)
	_, err := p.Run(context.Background())
	require.NoError(t, err)
	srv := newServer(t, in)

	s := openStream(t, srv.URL)
	first := s.next(t)
	st := p.Stats()
	assert.Equal(t, "orders", first.Pipeline)
	assert.Equal(t, st.RunID, first.RunID)
	assert.False(t, first.Running)
	require.Len(t, first.Nodes, 3)
	for i, n := range st.Nodes {
		assert.Equal(t, n.Node, first.Nodes[i].Name)
		assert.Equal(t, n.In, first.Nodes[i].In, n.Node)
		assert.Equal(t, n.Out, first.Nodes[i].Out, n.Node)
		assert.Equal(t, n.DeadLettered, first.Nodes[i].DeadLettered, n.Node)
	}
	assert.Equal(t, int64(97), first.Nodes[2].Out)
	assert.Equal(t, 3, first.DeadLetters)
	require.Len(t, first.Groups, 1)
	assert.Equal(t, inspect.ReasonGroup{Reason: errBad.Error(), Count: 3}, first.Groups[0])

	// The next snapshot waits for the interval on the Inspector's clock.
	require.NoError(t, clock.BlockUntilContext(context.Background(), 1))
	clock.Advance(time.Second)
	second := s.next(t)
	assert.Equal(t, first.Nodes, second.Nodes)
	assert.Equal(t, 1, in.Watchers())
}

// gate is a source that emits one order per value sent on its channel and
// ends when the channel closes or its context is done (a drain).
type gate chan int

func (g gate) Run(ctx context.Context, out node.Emitter[order]) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case id, ok := <-g:
			if !ok {
				return nil
			}
			if err := out.Emit(ctx, order{ID: id}); err != nil {
				return err
			}
		}
	}
}

func TestRunEndsWhileClientWatches(t *testing.T) {
	clock := clockwork.NewFakeClock()
	in := inspect.New(inspect.WithClock(clock))
	g := make(gate)
	p, _ := build(t, in, g, false, nil, 2)
	run := pipelinetest.Start(context.Background(), p)
	g <- 1
	g <- 2
	srv := newServer(t, in)
	s := openStream(t, srv.URL)
	live := s.next(t)
	assert.True(t, live.Running)
	assert.NotEqual(t, "", live.RunID)

	close(g)
	_, err := run.Wait()
	require.NoError(t, err)
	require.NoError(t, clock.BlockUntilContext(context.Background(), 1))
	clock.Advance(inspect.DefaultInterval)
	ended := s.next(t)
	assert.False(t, ended.Running)
	assert.Equal(t, live.RunID, ended.RunID)
	assert.Equal(t, int64(1), ended.Nodes[2].Out)
	assert.Equal(t, int64(1), ended.Nodes[1].DeadLettered)
	assert.Equal(t, 1, ended.DeadLetters)
	// The stream stays open after the run: the page keeps its last numbers.
	clock.Advance(inspect.DefaultInterval)
	assert.False(t, s.next(t).Running)
}

type page struct {
	Total       int                  `json:"total"`
	Offset      int                  `json:"offset"`
	Limit       int                  `json:"limit"`
	DeadLetters []inspect.DeadLetter `json:"deadLetters"`
	Groups      []inspect.ReasonGroup
	Reasons     int
}

func TestDeadLettersArePaged(t *testing.T) {
	in := inspect.New()
	const n = 10_000
	for i := range n {
		in.OnDeadLetter(observer.DeadLetterEvent{Event: observer.Event{Node: "check"}, OriginNode: "check",
			Key: fmt.Sprintf("k%d", i+1), Attempts: 1, Err: fmt.Errorf("reason %c", 'a'+i%3)})
	}
	// A broker retry is no dead letter.
	in.OnDeadLetter(observer.DeadLetterEvent{Key: "retried", Err: errBad, BrokerRetry: true})
	srv := newServer(t, in)

	var p page
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/deadletters", &p))
	assert.Equal(t, n, p.Total)
	assert.Equal(t, 50, p.Limit)
	require.Len(t, p.DeadLetters, 50)
	assert.Equal(t, 1, p.DeadLetters[0].ID)
	assert.Equal(t, "k1", p.DeadLetters[0].Key)
	assert.Equal(t, 3, p.Reasons)
	assert.Equal(t, []inspect.ReasonGroup{{Reason: "reason a", Count: 3334}, {Reason: "reason b", Count: 3333}, {Reason: "reason c", Count: 3333}}, p.Groups)

	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/deadletters?offset=9990&limit=50", &p))
	require.Len(t, p.DeadLetters, 10)
	assert.Equal(t, "k10000", p.DeadLetters[9].Key)
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/deadletters?offset=10000", &p))
	assert.Len(t, p.DeadLetters, 0)
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/deadletters?limit=100000", &p))
	assert.Len(t, p.DeadLetters, 200, "a page holds at most 200")

	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/deadletters?reason=reason+c&offset=3330", &p))
	assert.Equal(t, 3333, p.Total)
	require.Len(t, p.DeadLetters, 3)
	for _, d := range p.DeadLetters {
		assert.Equal(t, "reason c", d.Reason)
	}
	assert.Equal(t, "k9999", p.DeadLetters[2].Key)
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/deadletters?reason=nothing", &p))
	assert.Equal(t, 0, p.Total)

	for _, bad := range []string{"offset=-1", "limit=0", "offset=x"} {
		assert.Equal(t, http.StatusBadRequest, getJSON(t, srv.URL+"/api/deadletters?"+bad, nil), bad)
	}
	var one inspect.DeadLetter
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/deadletters/10000", &one))
	assert.Equal(t, "k10000", one.Key)
	for _, bad := range []string{"0", "10001", "x"} {
		assert.Equal(t, http.StatusNotFound, getJSON(t, srv.URL+"/api/deadletters/"+bad, nil), bad)
	}
}

func TestMaxDeadLettersCountsTheRest(t *testing.T) {
	in := inspect.New(inspect.WithMaxDeadLetters(2), inspect.WithClock(clockwork.NewFakeClock()))
	for i := range 5 {
		in.OnDeadLetter(observer.DeadLetterEvent{Key: fmt.Sprint(i), Err: errBad})
	}
	srv := newServer(t, in)
	var p page
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/deadletters", &p))
	assert.Equal(t, 2, p.Total)
	var sn snap
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/snapshot", &sn))
	assert.Equal(t, 5, sn.DeadLetters)
	assert.Equal(t, 2, sn.Listed)
}

func TestItemsHiddenByDefault(t *testing.T) {
	for _, show := range []bool{false, true} {
		t.Run(fmt.Sprint("show=", show), func(t *testing.T) {
			var opts []inspect.Option
			if show {
				opts = append(opts, inspect.ShowItems())
			}
			in := inspect.New(opts...)
			p, mem := build(t, in, orders(5), true, nil, 4)
			_, err := p.Run(context.Background())
			require.NoError(t, err)
			require.Equal(t, 1, mem.Len(), "the wrapped sink still gets the envelope")
			srv := newServer(t, in)

			list := getBody(t, srv.URL+"/api/deadletters")
			one := getBody(t, srv.URL+"/api/deadletters/1")
			snapshot := getBody(t, srv.URL+"/api/snapshot")
			assert.NotContains(t, list, "person4@example.com", "a page of the list never holds the item")
			assert.NotContains(t, snapshot, "person4@example.com")
			var d inspect.DeadLetter
			require.NoError(t, json.Unmarshal([]byte(one), &d))
			assert.Equal(t, "order-4", d.Key)
			assert.Equal(t, "check", d.OriginNode)
			assert.Equal(t, errBad.Error(), d.Reason)
			assert.Contains(t, d.ItemType, "inspect_test.order")
			require.Len(t, d.History, 1, "the envelope's history")
			assert.Equal(t, errBad.Error(), d.History[0].Err)
			if show {
				assert.Contains(t, d.Item, "person4@example.com")
			} else {
				assert.NotContains(t, one, "person4@example.com")
				assert.Equal(t, "", d.Item)
			}
		})
	}
}

func TestControlsOffByDefault(t *testing.T) {
	in := inspect.New()
	g := make(gate)
	passed := make(chan int, 1)
	p, _ := build(t, in, g, false, passed)
	run := pipelinetest.Start(context.Background(), p)
	// An item through: the run is under way (Start returns before Run
	// begins, and a run not yet started is not Running either).
	g <- 1
	<-passed
	srv := newServer(t, in)

	var gv struct{ CanDrain, CanCancel, ShowItems bool }
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/graph", &gv))
	assert.False(t, gv.CanDrain)
	assert.False(t, gv.CanCancel)
	assert.False(t, gv.ShowItems)
	for _, what := range []string{"drain", "cancel"} {
		assert.Equal(t, http.StatusForbidden, post(t, srv.URL+"/api/"+what, true), what)
		assert.Equal(t, http.StatusMethodNotAllowed, getJSON(t, srv.URL+"/api/"+what, nil), what)
	}
	assert.True(t, p.Stats().Running, "nothing stopped the run")
	assert.False(t, p.Stats().Draining)
	close(g)
	_, err := run.Wait()
	require.NoError(t, err)
}

func TestDrainButton(t *testing.T) {
	in := inspect.New(inspect.AllowDrain())
	g := make(gate)
	passed := make(chan int, 1)
	p, _ := build(t, in, g, false, passed)
	run := pipelinetest.Start(context.Background(), p)
	g <- 1
	<-passed
	srv := newServer(t, in)
	var gv struct{ CanDrain, CanCancel bool }
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/graph", &gv))
	assert.True(t, gv.CanDrain)
	assert.False(t, gv.CanCancel)

	assert.Equal(t, http.StatusForbidden, post(t, srv.URL+"/api/drain", false), "without the header")
	assert.False(t, p.Stats().Draining)
	assert.Equal(t, http.StatusForbidden, post(t, srv.URL+"/api/cancel", true), "cancel stays off")
	assert.Equal(t, http.StatusOK, post(t, srv.URL+"/api/drain", true))
	res, err := run.Wait()
	require.NoError(t, err, "a drained run ends without error")
	assert.True(t, p.Stats().Draining)
	n, _ := res.Node("store")
	assert.Equal(t, int64(1), n.Out)
}

func TestCancelButton(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in := inspect.New(inspect.AllowCancel(cancel))
	g := make(gate)
	p, _ := build(t, in, g, false, nil)
	run := pipelinetest.Start(ctx, p)
	srv := newServer(t, in)
	assert.Equal(t, http.StatusForbidden, post(t, srv.URL+"/api/drain", true), "drain stays off")
	assert.Equal(t, http.StatusForbidden, post(t, srv.URL+"/api/cancel", false), "without the header")
	assert.Nil(t, ctx.Err())
	assert.Equal(t, http.StatusOK, post(t, srv.URL+"/api/cancel", true))
	_, err := run.Wait()
	assert.ErrorIs(t, err, context.Canceled)
}

func TestManyClients(t *testing.T) {
	clock := clockwork.NewFakeClock()
	const clients = 20
	in := inspect.New(inspect.WithClock(clock), inspect.WithMaxWatchers(clients))
	p, _ := build(t, in, orders(10), false, nil, 1)
	_, err := p.Run(context.Background())
	require.NoError(t, err)
	srv := newServer(t, in)

	streams := make([]*stream, clients)
	var wg sync.WaitGroup
	for i := range streams {
		streams[i] = openStream(t, srv.URL)
	}
	assert.Equal(t, http.StatusServiceUnavailable, getJSON(t, srv.URL+"/api/events", nil), "one page past WithMaxWatchers")
	for _, s := range streams {
		assert.Equal(t, int64(9), s.next(t).Nodes[2].Out)
	}
	require.NoError(t, clock.BlockUntilContext(context.Background(), clients))
	assert.Equal(t, clients, in.Watchers())
	clock.Advance(inspect.DefaultInterval)
	for _, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.Equal(t, 1, s.next(t).DeadLetters)
		}()
	}
	wg.Wait()
	for _, s := range streams {
		s.close()
	}
	// Every handler returns once its client is gone, ticker stopped.
	require.NoError(t, clock.BlockUntilContext(context.Background(), 0))
	srv.Close()
	assert.Equal(t, 0, in.Watchers())
}

func TestClientDisconnectLeaksNothing(t *testing.T) {
	in := inspect.New()
	srv := httptest.NewServer(in)
	s := openStream(t, srv.URL)
	s.next(t)
	s.close()
	srv.Close() // waits for the handlers to return
	goleak.VerifyNone(t)
	assert.Equal(t, 0, in.Watchers())
}

func TestPageIsSelfContained(t *testing.T) {
	in := inspect.New()
	srv := newServer(t, in)
	html := getBody(t, srv.URL+"/")
	assert.Contains(t, html, `src="app.js"`)
	assert.Contains(t, html, `href="app.css"`)
	js := getBody(t, srv.URL+"/app.js")
	assert.Contains(t, js, `new EventSource("api/events")`)
	for _, body := range []string{html, js, getBody(t, srv.URL+"/app.css")} {
		assert.NotContains(t, body, "http://cdn")
		assert.NotContains(t, body, "https://")
	}
	assert.Equal(t, http.StatusNotFound, getJSON(t, srv.URL+"/nothing.js", nil))

	// Mounted under a prefix, the page's relative URLs still work.
	mux := http.NewServeMux()
	mux.Handle("/inspect/", http.StripPrefix("/inspect", in))
	srv2 := newServer(t, mux)
	assert.Contains(t, getBody(t, srv2.URL+"/inspect/"), "Sluice inspector")
	var gv struct{ Pipeline string }
	assert.Equal(t, http.StatusOK, getJSON(t, srv2.URL+"/inspect/api/graph", &gv))
}

func TestGraphOfThePipeline(t *testing.T) {
	in := inspect.New()
	build(t, in, orders(1), false, nil)
	srv := newServer(t, in)
	var gv struct {
		Pipeline string
		Nodes    []struct {
			Name, Kind string
			Parallel   int
			Keyed      bool
			Layers     []string
		}
		Edges []struct{ From, To int }
	}
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/graph", &gv))
	assert.Equal(t, "orders", gv.Pipeline)
	require.Len(t, gv.Nodes, 3)
	assert.Equal(t, "check", gv.Nodes[1].Name)
	assert.Equal(t, "transform", gv.Nodes[1].Kind)
	assert.Equal(t, 2, gv.Nodes[1].Parallel)
	assert.Contains(t, gv.Nodes[1].Layers, "dead letter")
	assert.Equal(t, []struct{ From, To int }{{0, 1}, {1, 2}}, gv.Edges)
}

func TestOnePipelinePerInspector(t *testing.T) {
	in := inspect.New()
	build(t, in, orders(1), false, nil)
	b := pipeline.New("other", pipeline.WithObserver(in))
	pipeline.Sink(b, "store", pipeline.Source(b, "read", orders(1)), &pipelinetest.Collector[order]{})
	_, err := b.Build()
	assert.ErrorContains(t, err, `already shows pipeline "orders"`)
	assert.Error(t, in.UseStats(nil))
}

func TestBadOptionsPanic(t *testing.T) {
	for name, o := range map[string]inspect.Option{
		"interval": inspect.WithInterval(0), "max": inspect.WithMaxDeadLetters(-1),
		"clock": inspect.WithClock(nil), "cancel": inspect.AllowCancel(nil),
	} {
		assert.Panics(t, func() { inspect.New(o) }, name)
	}
}

func TestCloseEndsTheStreams(t *testing.T) {
	in := inspect.New(inspect.WithClock(clockwork.NewFakeClock()))
	srv := newServer(t, in)
	s := openStream(t, srv.URL)
	s.next(t)
	in.Close()
	_, err := io.ReadAll(s.r)
	require.NoError(t, err, "the stream ends cleanly")
	// Shutdown waits for no page, and a new stream ends at once.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s2 := openStream(t, srv.URL)
	s2.next(t)
	_, err = io.ReadAll(s2.r)
	require.NoError(t, err)
	require.NoError(t, srv.Config.Shutdown(ctx))
	in.Close()
	assert.Equal(t, 0, in.Watchers())
}

// The page's counts add up every run of the pipeline, as Stats does: the
// dead letters' total, groups and list too, each letter naming its run, so
// that after a second run the total agrees with the node's count (6, not
// the run's 3).
func TestDeadLettersAddUpEveryRunAsTheCountsDo(t *testing.T) {
	in := inspect.New()
	p, _ := build(t, in, orders(10), false, nil, 2, 4, 6)
	first, err := p.Run(context.Background())
	require.NoError(t, err)
	second, err := p.Run(context.Background())
	require.NoError(t, err)
	require.NotEqual(t, first.RunID, second.RunID)
	srv := newServer(t, in)
	var s snap
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/snapshot", &s))
	var check int64
	for _, n := range s.Nodes {
		if n.Name == "check" {
			check = n.DeadLettered
		}
	}
	assert.Equal(t, int64(6), check, "the node's count, both runs'")
	assert.Equal(t, 6, s.DeadLetters)
	var page struct {
		Total       int
		DeadLetters []struct{ RunID string }
	}
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL+"/api/deadletters", &page))
	assert.Equal(t, 6, page.Total)
	runs := map[string]int{}
	for _, d := range page.DeadLetters {
		runs[d.RunID]++
	}
	assert.Equal(t, map[string]int{first.RunID: 3, second.RunID: 3}, runs)
}

// Close sends each stream one last snapshot, then ends it: a page that
// watched a run to its end sees the counts as they stand after it, not
// running, before the server goes (the demo closes its server right after
// the run). Before, the stream ended with nothing more, and the page's
// last snapshot was up to an interval old and said running.
func TestCloseSendsALastSnapshot(t *testing.T) {
	in := inspect.New(inspect.WithClock(clockwork.NewFakeClock()))
	p, _ := build(t, in, orders(10), false, nil, 2, 4, 6)
	srv := newServer(t, in)
	s := openStream(t, srv.URL)
	before := s.next(t)
	assert.Equal(t, 0, before.DeadLetters)
	_, err := p.Run(context.Background()) // no tick: the clock stands still
	require.NoError(t, err)
	in.Close()
	last := s.next(t)
	assert.False(t, last.Running)
	assert.Equal(t, 3, last.DeadLetters)
	for _, n := range last.Nodes {
		if n.Name == "check" {
			assert.Equal(t, int64(10), n.In)
			assert.Equal(t, int64(3), n.DeadLettered)
		}
	}
	rest, err := io.ReadAll(s.r)
	require.NoError(t, err, "the stream ends cleanly")
	assert.Empty(t, string(rest), "one last snapshot only")
}
