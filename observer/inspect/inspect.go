// Package inspect serves a live inspector page for one pipeline: an
// [http.Handler] a program mounts where it chooses. The page, embedded in
// the binary (no CDN, no build step), draws the pipeline as SVG (its
// nodes, edges, Keyed and Parallel workers and the resilience layers
// armed) and updates it over server-sent events: each node's in and out,
// rates, retries, breaker state, retry budget use, hand-offs and dead
// letters, with a small rate chart per node. The dead letters (of every run) are
// listed grouped by reason, paged, and each opens to its history.
//
// The inspector is safe by default: it is read-only unless [AllowDrain]
// or [AllowCancel] is given (without them the control endpoints answer
// 403 and the page shows no buttons), it never shows item contents unless
// [ShowItems] is given (only keys, types and reasons), it listens
// nowhere itself, it answers only for IP addresses, localhost and the
// names [AllowHosts] lists (against DNS rebinding), and no other site may
// frame it. When nobody watches it costs the pipeline an atomic
// add per item retry, retry exhaustion and breaker change, and a short
// list entry per dead letter: the page's snapshots are made only while a
// client is connected.
//
// An Inspector is an [observer.StatsUser]: pass it to the pipeline with
// pipeline.WithObserver, and Build hands it the pipeline. It shows one
// pipeline; build one Inspector per pipeline.
package inspect

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/sluicehq/sluice/deadletter"
	"github.com/sluicehq/sluice/internal/reason"
	"github.com/sluicehq/sluice/internal/same"
	"github.com/sluicehq/sluice/observer"
	"github.com/sluicehq/sluice/pipeline"
	"github.com/sluicehq/sluice/resilience"
)

//go:embed assets
var assets embed.FS

// DefaultInterval is how often the page's event stream sends a snapshot
// when no [WithInterval] is given.
const DefaultInterval = 500 * time.Millisecond

// DefaultMaxDeadLetters is how many dead letters an Inspector keeps for
// the page when no [WithMaxDeadLetters] is given; later ones are counted
// but not listed. Each kept dead letter costs about 200 bytes plus its
// key, its error's text (shared when it is the first text of its reason)
// and, from [Inspector.DeadLetterSink], its history.
const DefaultMaxDeadLetters = 10_000

// DefaultMaxReasons is how many distinct reasons an Inspector counts
// apart when no [WithMaxReasons] is given; the dead letters of later
// reasons are counted together, in one group marked Other.
const DefaultMaxReasons = 1000

// DefaultWriteTimeout bounds each write of the event stream when no
// [WithWriteTimeout] is given: a page that stops reading is let go.
const DefaultWriteTimeout = 10 * time.Second

// DefaultMaxWatchers is how many pages may watch the event stream at once
// when no [WithMaxWatchers] is given; more are answered 503.
const DefaultMaxWatchers = 16

// ControlHeader is the request header the control endpoints (drain and
// cancel) require, with the value "1". A browser sends a custom header
// only from a page of the same origin (or after a CORS preflight the
// handler does not answer), so another site's form cannot stop a job.
const ControlHeader = "X-Sluice-Inspect"

// A Grapher draws a pipeline: *pipeline.Pipeline is one. The inspector
// asks the pipeline Build hands it for this, and draws no edges when the
// pipeline does not have it.
type Grapher interface {
	Graph() pipeline.Graph
}

// A Drainer stops a run's sources and lets the items in flight finish:
// *pipeline.Pipeline is one. [AllowDrain] uses the pipeline's Drain.
type Drainer interface {
	Drain() bool
}

// An Option configures an Inspector.
type Option func(*config)

type config struct {
	clock      clockwork.Clock
	interval   time.Duration
	maxDead    int
	drain      bool
	cancel     context.CancelFunc
	showItems  bool
	maxReasons int
	writeTO    time.Duration
	maxWatch   int
	hosts      map[string]bool
	configErrs []error
}

// WithClock sets the clock that paces the event stream; the real clock by
// default. Tests pass a fake one.
func WithClock(c clockwork.Clock) Option {
	return func(cfg *config) {
		if c == nil {
			cfg.configErrs = append(cfg.configErrs, errors.New("inspect: WithClock: nil clock"))
			return
		}
		cfg.clock = c
	}
}

// WithInterval sets how often the event stream sends a snapshot to each
// connected page; [DefaultInterval] by default. It must be positive.
func WithInterval(d time.Duration) Option {
	return func(cfg *config) {
		if d <= 0 {
			cfg.configErrs = append(cfg.configErrs, fmt.Errorf("inspect: WithInterval(%v): must be positive", d))
			return
		}
		cfg.interval = d
	}
}

// WithMaxDeadLetters sets how many dead letters the Inspector keeps for
// the page ([DefaultMaxDeadLetters] by default); later ones count in the
// totals but are not listed. It must be positive.
func WithMaxDeadLetters(n int) Option {
	return func(cfg *config) {
		if n <= 0 {
			cfg.configErrs = append(cfg.configErrs, fmt.Errorf("inspect: WithMaxDeadLetters(%d): must be positive", n))
			return
		}
		cfg.maxDead = n
	}
}

// WithMaxReasons sets how many distinct reasons the Inspector counts
// apart ([DefaultMaxReasons] by default): the dead letters of the reasons
// that come later are listed and counted in one group marked Other. A
// snapshot's cost grows with this bound, not with the dead letters. It
// must be positive.
func WithMaxReasons(n int) Option {
	return func(cfg *config) {
		if n <= 0 {
			cfg.configErrs = append(cfg.configErrs, fmt.Errorf("inspect: WithMaxReasons(%d): must be positive", n))
			return
		}
		cfg.maxReasons = n
	}
}

// WithWriteTimeout bounds each write of the event stream
// ([DefaultWriteTimeout] by default): a page that reads nothing for that
// long (a frozen tab, a lost network) is let go. It is measured on the
// real clock, as the connection's deadlines are. It must be positive.
func WithWriteTimeout(d time.Duration) Option {
	return func(cfg *config) {
		if d <= 0 {
			cfg.configErrs = append(cfg.configErrs, fmt.Errorf("inspect: WithWriteTimeout(%v): must be positive", d))
			return
		}
		cfg.writeTO = d
	}
}

// WithMaxWatchers sets how many pages may watch the event stream at once
// ([DefaultMaxWatchers] by default); the stream answers more with 503
// Service Unavailable. It must be positive.
func WithMaxWatchers(n int) Option {
	return func(cfg *config) {
		if n <= 0 {
			cfg.configErrs = append(cfg.configErrs, fmt.Errorf("inspect: WithMaxWatchers(%d): must be positive", n))
			return
		}
		cfg.maxWatch = n
	}
}

// AllowHosts adds host names (without port) the Inspector answers for.
// By default it answers only requests whose Host is an IP address,
// "localhost" or a name under ".localhost", and refuses others with 421
// Misdirected Request: a site the user visits cannot rebind its own name
// to the inspector's address and read the page (DNS rebinding). A program
// that serves the page under a name (behind a proxy, on a LAN host name)
// lists that name here. Names compare without case; an empty name is an
// error.
func AllowHosts(names ...string) Option {
	return func(cfg *config) {
		for _, n := range names {
			if n == "" || strings.ContainsAny(n, ":/ ") {
				cfg.configErrs = append(cfg.configErrs, fmt.Errorf("inspect: AllowHosts(%q): want a host name without port", n))
				continue
			}
			if cfg.hosts == nil {
				cfg.hosts = map[string]bool{}
			}
			cfg.hosts[strings.ToLower(n)] = true
		}
	}
}

// AllowDrain shows a Drain button on the page and answers POST drain:
// it drains the running run (pipeline.Pipeline.Drain). Off by default,
// since a page that stops a job must not be reachable by accident.
func AllowDrain() Option {
	return func(cfg *config) { cfg.drain = true }
}

// AllowCancel shows a Cancel button on the page and answers POST cancel
// by calling cancel, which should cancel the context the program passed
// to Run. Off by default. A nil cancel is an error.
func AllowCancel(cancel context.CancelFunc) Option {
	return func(cfg *config) {
		if cancel == nil {
			cfg.configErrs = append(cfg.configErrs, errors.New("inspect: AllowCancel: nil cancel function"))
			return
		}
		cfg.cancel = cancel
	}
}

// ShowItems lets the page show a dead letter's item, as
// deadletter.Describe renders it, when the dead letters reach the
// Inspector through [Inspector.DeadLetterSink]. Off by default, since
// items may hold personal data: the page shows only keys, item types and
// reasons.
func ShowItems() Option {
	return func(cfg *config) { cfg.showItems = true }
}

// An Inspector watches one pipeline and serves its page. Make one with
// [New]; its zero value is not usable.
type Inspector struct {
	cfg config
	mux *http.ServeMux

	mu      sync.Mutex
	stats   observer.StatsReader
	grapher Grapher
	drainer Drainer
	nodes   atomic.Pointer[map[string]*nodeCounters] // read-only once set

	watchers atomic.Int32
	wrapped  atomic.Bool // DeadLetterSink was called: it records the dead letters
	dead     deadLetters

	closeOnce sync.Once
	closed    chan struct{} // closed by Close: the event streams end
}

// nodeCounters are the counts of one node that the pipeline's Stats does
// not hold; they are only added to.
type nodeCounters struct {
	itemRetries     atomic.Int64 // item retries announced (OnRetry)
	exhausted       atomic.Int64 // retry layers that ran out
	budgetExhausted atomic.Int64 // of them, ended by the retry budget
	breakerChanges  atomic.Int64 // breaker transitions
	// base is set when the node starts a run: nothing is parked then.
	base atomic.Pointer[runBase]
}

// A runBase is the item retries of a node announced before its run
// started and never made (the run ended while they waited, or their wait
// ran past MaxElapsed): not parked in this run.
type runBase struct {
	runID     string
	abandoned int64
}

// New returns an Inspector. An invalid option panics with a message that
// names it, as the options are written in the program's code.
func New(opts ...Option) *Inspector {
	cfg := config{clock: clockwork.NewRealClock(), interval: DefaultInterval, maxDead: DefaultMaxDeadLetters,
		maxReasons: DefaultMaxReasons, writeTO: DefaultWriteTimeout, maxWatch: DefaultMaxWatchers}
	for _, o := range opts {
		o(&cfg)
	}
	if err := errors.Join(cfg.configErrs...); err != nil {
		panic(err)
	}
	in := &Inspector{cfg: cfg, closed: make(chan struct{})}
	in.dead.max, in.dead.maxReasons = cfg.maxDead, cfg.maxReasons
	in.routes()
	return in
}

// UseStats hands the Inspector the pipeline it shows; pipeline.Builder's
// Build calls it. When sr is a *pipeline.Pipeline (a [Grapher] and a
// [Drainer]) the page draws its edges and can drain it. A second
// pipeline is refused: an Inspector shows one.
func (in *Inspector) UseStats(sr observer.StatsReader) error {
	if sr == nil {
		return errors.New("inspect: UseStats: nil StatsReader")
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.stats != nil {
		return fmt.Errorf("inspect: UseStats: the Inspector already shows pipeline %q; make one Inspector per pipeline", in.stats.Stats().Pipeline)
	}
	in.stats = sr
	in.grapher, _ = sr.(Grapher)
	in.drainer, _ = sr.(Drainer)
	nodes := map[string]*nodeCounters{}
	for _, n := range sr.Stats().Nodes {
		nodes[n.Node] = &nodeCounters{}
	}
	in.nodes.Store(&nodes)
	return nil
}

// ForgetStats lets go of sr when Build failed after handing it over.
func (in *Inspector) ForgetStats(sr observer.StatsReader) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if same.Is(in.stats, sr) {
		in.stats, in.grapher, in.drainer = nil, nil, nil
		in.nodes.Store(nil)
	}
}

func (in *Inspector) node(name string) *nodeCounters {
	if m := in.nodes.Load(); m != nil {
		return (*m)[name]
	}
	return nil
}

// Close ends every event stream, now and later, each after one last
// snapshot (the counts as they stand then: after the run's end, exact and
// not running), so that an http.Server's Shutdown, which waits for the
// requests in progress, does not wait for the pages: call it before
// Shutdown. The page and its other endpoints are still served. Close may
// be called more than once.
func (in *Inspector) Close() {
	in.closeOnce.Do(func() { close(in.closed) })
}

// Watchers returns how many pages are connected to the event stream.
func (in *Inspector) Watchers() int { return int(in.watchers.Load()) }

// OnNodeStarted marks the start of the node's run: nothing is parked yet,
// so the item retries announced and never made until now are left out of
// the retries parked from here on.
func (in *Inspector) OnNodeStarted(e observer.NodeEvent) {
	c := in.node(e.Node)
	if c == nil {
		return
	}
	in.mu.Lock()
	sr := in.stats
	in.mu.Unlock()
	if sr == nil {
		return
	}
	for _, n := range sr.Stats().Nodes {
		if n.Node == e.Node {
			c.base.Store(&runBase{runID: e.RunID, abandoned: c.itemRetries.Load() - n.ItemRetries})
			return
		}
	}
}

// OnNodeCompleted does nothing: the snapshots read the pipeline's Stats.
func (in *Inspector) OnNodeCompleted(observer.NodeEvent) {}

// OnRetry counts the node's item retries as they are announced: the
// pipeline's Stats counts a retry only once its call is made, so the
// difference is the retries waiting now, parked or in place.
func (in *Inspector) OnRetry(e observer.RetryEvent) {
	if e.Kind != resilience.ItemRetry {
		return
	}
	if c := in.node(e.Node); c != nil {
		c.itemRetries.Add(1)
	}
}

// OnDrop does nothing: the skipped items are in the pipeline's Stats.
func (in *Inspector) OnDrop(observer.DropEvent) {}

// OnRetryExhausted counts the node's exhausted retry layers, and those the
// retry budget ended.
func (in *Inspector) OnRetryExhausted(e observer.RetryExhaustedEvent) {
	if c := in.node(e.Node); c != nil {
		c.exhausted.Add(1)
		if e.Limit == resilience.LimitBudget {
			c.budgetExhausted.Add(1)
		}
	}
}

// OnCircuitStateChanged counts the node's breaker transitions; the state
// itself is in the pipeline's Stats.
func (in *Inspector) OnCircuitStateChanged(e observer.CircuitEvent) {
	if c := in.node(e.Node); c != nil {
		c.breakerChanges.Add(1)
	}
}

// OnDeadLetter lists the dead letter for the page, unless
// [Inspector.DeadLetterSink] does (with its history). A broker retry is
// no dead letter.
func (in *Inspector) OnDeadLetter(e observer.DeadLetterEvent) {
	if e.BrokerRetry || in.wrapped.Load() {
		return
	}
	text := ""
	if e.Err != nil {
		text = e.Err.Error()
	}
	in.dead.add(DeadLetter{Time: e.Time, RunID: e.RunID, Node: e.Node, OriginNode: e.OriginNode,
		Key: e.Key, Attempts: e.Attempts, Reason: text}, reason.Status(e.Err))
}

// DeadLetterSink returns a dead-letter sink that lists each envelope for
// the page, with its history, then writes it to next; give it to
// pipeline.WithDeadLetter in place of next. Without it the page lists
// the dead letters from the pipeline's events, which carry no history.
// The item is kept (as deadletter.Describe renders it) only with
// [ShowItems]. An envelope next fails to write is not listed: the engine
// retries it.
//
// When next is a deadletter.BrokerRetrier (a broker source's sink), the
// sink returned is one too: an item next gives back to its broker is no
// dead letter and is not listed, and the engine counts it as a broker
// retry as it would without the Inspector.
func (in *Inspector) DeadLetterSink(next deadletter.Sink) deadletter.Sink {
	in.wrapped.Store(true)
	s := &listingSink{in: in, next: next}
	if br, ok := next.(deadletter.BrokerRetrier); ok {
		return &listingRetrier{listingSink: s, next: br}
	}
	return s
}

// A listingSink lists each envelope it writes to next.
type listingSink struct {
	in   *Inspector
	next deadletter.Sink
}

// Write writes env to next and lists it.
func (s *listingSink) Write(ctx context.Context, env deadletter.Envelope) error {
	if err := s.next.Write(ctx, env); err != nil {
		return err
	}
	s.in.list(env)
	return nil
}

// A listingRetrier is a listingSink of a BrokerRetrier: it keeps
// WriteOrRetry, so that the engine still finds it.
type listingRetrier struct {
	*listingSink
	next deadletter.BrokerRetrier
}

// WriteOrRetry asks next, and lists env when next stored it.
func (s *listingRetrier) WriteOrRetry(ctx context.Context, env deadletter.Envelope) (bool, error) {
	retried, err := s.next.WriteOrRetry(ctx, env)
	if err == nil && !retried {
		s.in.list(env)
	}
	return retried, err
}

// list lists a dead letter written by the program's sink.
func (in *Inspector) list(env deadletter.Envelope) {
	d := DeadLetter{Time: env.LastFailure, RunID: env.RunID, Node: env.DecisionNode, OriginNode: env.OriginNode,
		Key: env.CorrelationID, Attempts: env.Attempts, Reason: env.ErrText, ItemType: env.ItemType,
		History: append([]deadletter.Attempt(nil), env.History...)}
	if d.Reason == "" && env.Err != nil {
		d.Reason = env.Err.Error()
	}
	if in.cfg.showItems {
		d.Item = deadletter.Describe(env.Item)
	}
	in.dead.add(d, reason.Status(env.Err))
}

// A DeadLetter is one dead letter as the page shows it.
type DeadLetter struct {
	// ID numbers the dead letters the Inspector listed, from 1.
	ID int `json:"id"`
	// Time is when the item last failed, on the pipeline's clock.
	Time time.Time `json:"time"`
	// RunID is the run the item failed in.
	RunID string `json:"runId"`
	// Node decided to dead-letter the item; OriginNode is where it failed.
	Node       string `json:"node"`
	OriginNode string `json:"originNode"` // where the item failed
	// Key is the item's correlation key; empty when it has none.
	Key string `json:"key"`
	// Attempts counts the calls made on the item.
	Attempts int `json:"attempts"`
	// Reason is the text of the item's last failure.
	Reason string `json:"reason"`
	// ItemType is the item's Go type, when the envelope named it.
	ItemType string `json:"itemType,omitempty"`
	// Item is the item as deadletter.Describe renders it, only with
	// ShowItems.
	Item string `json:"item,omitempty"`
	// History is the item's failed calls, oldest first, when the dead
	// letter came through DeadLetterSink.
	History []deadletter.Attempt `json:"history,omitempty"`
}

// deadLetters is the list of dead letters the page shows. The pipeline's
// dead-letter path adds one in O(1) under a short lock, and the page's
// readers hold that lock only to copy a few slice headers and counts: the
// list, the reasons and their dead letters are only appended to, and an
// element once written never changes, so readers read them after the
// unlock. The pipeline never waits for a page.
type deadLetters struct {
	mu         sync.Mutex
	max        int
	maxReasons int
	chunks     [][]DeadLetter // deadChunk each, full length from the start: never copied as the list grows
	n          int            // listed
	byReason   map[string]*reasonList
	order      []*reasonList // the reasons in byReason, in the order they came
	other      reasonList    // the listed dead letters whose reason came past maxReasons
	total      int           // dead letters heard of, listed or not
}

// deadChunk is how many dead letters one chunk of the list holds.
const deadChunk = 256

// A reasonList is the listed dead letters of one reason.
type reasonList struct {
	reason string       // the reason the list's dead letters share
	text   string       // the first one's text, which later ones of the same text share
	ids    []int32      // indexes into the list; under the lock
	count  atomic.Int32 // len(ids), for the readers without the lock
}

// add lists dl, whose error's status (reason.Status) is status, in the
// group of its reason: its text made short as slogobserver.Reason does, so
// that the failures that name their item ("malformed row \"o-7,12.5O\"")
// group together.
func (d *deadLetters) add(dl DeadLetter, status string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.total++
	if d.n >= d.max {
		return
	}
	if d.byReason == nil {
		d.byReason = map[string]*reasonList{}
	}
	key := reason.Of(dl.Reason, status)
	rl, ok := d.byReason[key]
	switch {
	case ok:
		if dl.Reason == rl.text {
			dl.Reason = rl.text // the dead letters of one text share it
		}
	case len(d.byReason) < d.maxReasons:
		rl = &reasonList{reason: key, text: dl.Reason}
		d.byReason[key] = rl
		d.order = append(d.order, rl)
	default:
		rl = &d.other
	}
	dl.ID = d.n + 1
	rl.ids = append(rl.ids, int32(d.n))
	rl.count.Store(int32(len(rl.ids)))
	if d.n%deadChunk == 0 {
		d.chunks = append(d.chunks, make([]DeadLetter, min(deadChunk, d.max-d.n)))
	}
	d.chunks[d.n/deadChunk][d.n%deadChunk] = dl
	d.n++
}

// A view is what a reader copies under the lock: elements below n and
// ids of the lists as copied are written for good.
type view struct {
	chunks [][]DeadLetter
	n      int
}

func (v view) at(i int) *DeadLetter { return &v.chunks[i/deadChunk][i%deadChunk] }

func (d *deadLetters) view() view {
	d.mu.Lock()
	defer d.mu.Unlock()
	return view{chunks: d.chunks, n: d.n}
}

// A ReasonGroup is the dead letters that failed with one reason.
type ReasonGroup struct {
	// Reason is the failures' text made short as slogobserver.Reason
	// does: quoted text is "…", words with digits are #.
	Reason string `json:"reason"`
	Count  int    `json:"count"` // how many dead letters failed with it
	// Other marks the group of the dead letters whose reasons came after
	// the Inspector kept WithMaxReasons distinct ones; its Reason is empty.
	Other bool `json:"other,omitempty"`
}

// groups returns the reasons, the most frequent first, at most limit of
// them, and the counts. It reads and sorts at most maxReasons counts,
// outside the lock.
func (d *deadLetters) groups(limit int) (gs []ReasonGroup, listed, total, reasons int) {
	d.mu.Lock()
	order := d.order
	listed, total = d.n, d.total
	d.mu.Unlock()
	gs = make([]ReasonGroup, 0, len(order)+1)
	for _, rl := range order {
		gs = append(gs, ReasonGroup{Reason: rl.reason, Count: int(rl.count.Load())})
	}
	if n := d.other.count.Load(); n > 0 {
		gs = append(gs, ReasonGroup{Count: int(n), Other: true})
	}
	reasons = len(gs)
	sortGroups(gs)
	return gs[:min(limit, len(gs))], listed, total, reasons
}

func sortGroups(gs []ReasonGroup) {
	sort.Slice(gs, func(i, j int) bool {
		if gs[i].Count != gs[j].Count {
			return gs[i].Count > gs[j].Count
		}
		if gs[i].Other != gs[j].Other {
			return !gs[i].Other
		}
		return gs[i].Reason < gs[j].Reason
	})
}

// page returns the dead letters from offset, at most limit, of the reason key
// when filter (of the other reasons when other), without their history
// and item, and how many there are.
func (d *deadLetters) page(key string, filter, other bool, offset, limit int) ([]DeadLetter, int) {
	d.mu.Lock()
	v := view{chunks: d.chunks, n: d.n}
	var ids []int32
	switch {
	case other:
		ids = d.other.ids
	case filter:
		if rl := d.byReason[key]; rl != nil {
			ids = rl.ids
		}
	}
	d.mu.Unlock()
	n := v.n
	if filter || other {
		n = len(ids)
	}
	out := make([]DeadLetter, 0, max(0, min(limit, n-offset)))
	for i := offset; i < n && len(out) < limit; i++ {
		j := i
		if filter || other {
			j = int(ids[i])
		}
		dl := *v.at(j)
		dl.History, dl.Item = nil, ""
		out = append(out, dl)
	}
	return out, n
}

func (d *deadLetters) get(id int) (DeadLetter, bool) {
	v := d.view()
	if id < 1 || id > v.n {
		return DeadLetter{}, false
	}
	return *v.at(id - 1), true
}

// ServeHTTP serves the page, its event stream and its endpoints. Mount it
// at a path of its own, with http.StripPrefix:
// mux.Handle("/inspect/", http.StripPrefix("/inspect", in)).
//
// It answers only the hosts [AllowHosts] describes (421 for others), and
// every answer forbids framing (X-Frame-Options: DENY and a
// Content-Security-Policy of default-src 'self' and frame-ancestors
// 'none'), so that another site can neither read the page through a
// rebound name nor frame its buttons.
func (in *Inspector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if !in.hostAllowed(r.Host) {
		http.Error(w, "inspect: this inspector does not answer for host "+strconv.Quote(r.Host)+" (see inspect.AllowHosts)", http.StatusMisdirectedRequest)
		return
	}
	in.mux.ServeHTTP(w, r)
}

// hostAllowed reports whether the Inspector answers for host (with or
// without port): an IP address, localhost, a name under .localhost, or a
// name AllowHosts lists. An empty Host (HTTP/1.0) is answered.
func (in *Inspector) hostAllowed(host string) bool {
	if host == "" {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), "."))
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return host == "localhost" || strings.HasSuffix(host, ".localhost") || in.cfg.hosts[host]
}

func (in *Inspector) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(static)
	m.Handle("GET /{$}", files)
	m.Handle("GET /app.js", files)
	m.Handle("GET /app.css", files)
	m.HandleFunc("GET /api/graph", in.serveGraph)
	m.HandleFunc("GET /api/snapshot", in.serveSnapshot)
	m.HandleFunc("GET /api/events", in.serveEvents)
	m.HandleFunc("GET /api/deadletters", in.serveDeadLetters)
	m.HandleFunc("GET /api/deadletters/{id}", in.serveDeadLetter)
	m.HandleFunc("POST /api/drain", in.serveDrain)
	m.HandleFunc("POST /api/cancel", in.serveCancel)
	in.mux = m
}

// graphView is what the page draws: the pipeline's graph and what the
// page may do.
type graphView struct {
	Pipeline  string      `json:"pipeline"`
	Nodes     []graphNode `json:"nodes"`
	Edges     []graphEdge `json:"edges"`
	CanDrain  bool        `json:"canDrain"`
	CanCancel bool        `json:"canCancel"`
	ShowItems bool        `json:"showItems"`
	Interval  int64       `json:"intervalMs"`
}

type graphNode struct {
	Name      string   `json:"name"`
	Kind      string   `json:"kind"`
	Parallel  int      `json:"parallel"`
	Keyed     bool     `json:"keyed"`
	Unordered bool     `json:"unordered"`
	Layers    []string `json:"layers"`
}

type graphEdge struct {
	From      int  `json:"from"`
	To        int  `json:"to"`
	Buffer    int  `json:"buffer"`
	Broadcast bool `json:"broadcast"`
}

func (in *Inspector) graph() graphView {
	in.mu.Lock()
	sr, gr, dr := in.stats, in.grapher, in.drainer
	in.mu.Unlock()
	v := graphView{Nodes: []graphNode{}, Edges: []graphEdge{}, CanDrain: in.cfg.drain && dr != nil,
		CanCancel: in.cfg.cancel != nil, ShowItems: in.cfg.showItems, Interval: in.cfg.interval.Milliseconds()}
	switch {
	case gr != nil:
		g := gr.Graph()
		v.Pipeline = g.Pipeline
		for _, n := range g.Nodes {
			v.Nodes = append(v.Nodes, graphNode{Name: n.Name, Kind: n.Kind.String(), Parallel: n.Parallel,
				Keyed: n.Keyed, Unordered: n.Unordered, Layers: append([]string{}, n.Layers...)})
		}
		for _, e := range g.Edges {
			v.Edges = append(v.Edges, graphEdge{From: e.From, To: e.To, Buffer: e.Buffer, Broadcast: e.Broadcast})
		}
	case sr != nil:
		s := sr.Stats()
		v.Pipeline = s.Pipeline
		for _, n := range s.Nodes {
			v.Nodes = append(v.Nodes, graphNode{Name: n.Node, Kind: n.Kind.String(), Parallel: 1, Layers: []string{}})
		}
	}
	return v
}

// A snapshot is what the event stream sends: the pipeline's counters now.
type snapshot struct {
	Pipeline  string         `json:"pipeline"`
	RunID     string         `json:"runId"`
	Running   bool           `json:"running"`
	Draining  bool           `json:"draining"`
	Time      int64          `json:"time"` // Unix milliseconds, on the Inspector's clock
	Nodes     []nodeSnapshot `json:"nodes"`
	Dead      int            `json:"deadLetters"` // heard of
	Listed    int            `json:"listed"`      // of them, listed
	Reasons   int            `json:"reasons"`     // distinct reasons listed
	TopGroups []ReasonGroup  `json:"groups"`      // the most frequent reasons
}

type nodeSnapshot struct {
	Name            string `json:"name"`
	In              int64  `json:"in"`
	Out             int64  `json:"out"`
	Failed          int64  `json:"failed"`
	Skipped         int64  `json:"skipped"`
	DeadLettered    int64  `json:"deadLettered"`
	Filtered        int64  `json:"filtered"`
	ItemRetries     int64  `json:"itemRetries"`
	NodeRestarts    int64  `json:"nodeRestarts"`
	NodeRetries     int64  `json:"nodeRetries"`
	Fallbacks       int64  `json:"fallbacks"`
	HandedOff       int64  `json:"handedOff"`
	BrokerRetries   int64  `json:"brokerRetries"`
	InFlight        int64  `json:"inFlight"`
	HasInFlight     bool   `json:"hasInFlight"`
	Size            int64  `json:"size"`
	Sized           bool   `json:"sized"`
	Circuit         string `json:"circuit"`
	BreakerChanges  int64  `json:"breakerChanges"`
	Exhausted       int64  `json:"exhausted"`
	BudgetExhausted int64  `json:"budgetExhausted"`
	Parked          int64  `json:"parked"` // item retries announced, not yet made (waiting, parked or in place); 0 between runs
}

func (in *Inspector) snapshot() snapshot {
	in.mu.Lock()
	sr := in.stats
	in.mu.Unlock()
	s := snapshot{Time: in.cfg.clock.Now().UnixMilli(), Nodes: []nodeSnapshot{}}
	if sr != nil {
		st := sr.Stats()
		s.Pipeline, s.RunID, s.Running, s.Draining = st.Pipeline, st.RunID, st.Running, st.Draining
		for _, n := range st.Nodes {
			ns := nodeSnapshot{Name: n.Node, In: n.In, Out: n.Out, Failed: n.Failed, Skipped: n.Skipped,
				DeadLettered: n.DeadLettered, Filtered: n.Filtered, ItemRetries: n.ItemRetries,
				NodeRestarts: n.NodeRestarts, NodeRetries: n.NodeRetries, Fallbacks: n.Fallbacks,
				HandedOff: n.HandedOff, BrokerRetries: n.BrokerRetries, InFlight: n.InFlight,
				HasInFlight: n.HasInFlight(), Size: n.Size, Sized: n.Sized, Circuit: n.Circuit.String()}
			if c := in.node(n.Node); c != nil {
				ns.BreakerChanges = c.breakerChanges.Load()
				ns.Exhausted = c.exhausted.Load()
				ns.BudgetExhausted = c.budgetExhausted.Load()
				if b := c.base.Load(); st.Running && b != nil && b.runID == st.RunID {
					// Stats counts a retry once it is made, after its
					// event, but a hand-off's before: never below 0. A node
					// not started in this run has nothing waiting.
					ns.Parked = max(0, c.itemRetries.Load()-n.ItemRetries-b.abandoned)
				}
			}
			s.Nodes = append(s.Nodes, ns)
		}
	}
	s.TopGroups, s.Listed, s.Dead, s.Reasons = in.dead.groups(20)
	return s
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

func (in *Inspector) serveGraph(w http.ResponseWriter, _ *http.Request) { writeJSON(w, in.graph()) }

func (in *Inspector) serveSnapshot(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, in.snapshot())
}

// serveEvents streams a snapshot at once and then every interval, until
// the client goes away, a write waits past the write timeout, or Close.
// A HEAD gets the headers only.
func (in *Inspector) serveEvents(w http.ResponseWriter, r *http.Request) {
	if !canFlush(w) {
		http.Error(w, "inspect: the event stream needs a ResponseWriter that flushes (http.Flusher); "+
			"a middleware in front of the Inspector hides it: give its writer an Unwrap method", http.StatusNotImplemented)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	if r.Method != http.MethodGet {
		w.WriteHeader(http.StatusOK)
		return
	}
	if n := in.watchers.Add(1); int(n) > in.cfg.maxWatch {
		in.watchers.Add(-1)
		http.Error(w, fmt.Sprintf("inspect: %d pages watch already (inspect.WithMaxWatchers)", in.cfg.maxWatch), http.StatusServiceUnavailable)
		return
	}
	defer in.watchers.Add(-1)
	rc := http.NewResponseController(w)
	// Close ends a write that waits for a page that reads nothing: it
	// moves the deadline to closeGrace from then, which a write that is
	// only finishing (and the response's end, once the handler returned
	// by itself) meets, and a stuck one does not. done keeps the
	// goroutine from touching rc after the handler returned.
	done := make(chan struct{})
	var wg sync.WaitGroup
	select {
	case <-in.closed:
		// After Close a page gets one snapshot, and its stream ends.
	default:
		wg.Go(func() {
			select {
			case <-in.closed:
				_ = rc.SetWriteDeadline(time.Now().Add(closeGrace))
			case <-done:
			}
		})
	}
	// However the stream ends (Close, the request's context, a write
	// error), what net/http writes once the handler returned, the
	// response's end, gets closeGrace, set after the goroutine above was
	// joined, so that nothing replaces it: a page that reads nothing
	// cannot hold the connection, and a Shutdown after Close, for the
	// write timeout. (Deferred calls run last first.)
	defer graceAfterClose(rc)
	defer wg.Wait()
	defer close(done)
	w.WriteHeader(http.StatusOK)
	tick := in.cfg.clock.NewTicker(in.cfg.interval)
	defer tick.Stop()
	for {
		// Once closed, the stream sends one last snapshot, the counts as
		// they stand at Close (a run that ended: exact, not running),
		// and ends.
		final := isClosed(in.closed)
		b, err := json.Marshal(in.snapshot())
		if err != nil {
			return
		}
		// The deadline is on the real clock, as the connection's are; a
		// writer without deadlines (ErrNotSupported) goes without. The
		// last snapshot gets closeGrace, as a write Close finds in
		// progress does: Close ends every stream. Close may have set
		// its deadline just before ours: look after, and send the last
		// snapshot then.
		to := in.cfg.writeTO
		if final {
			to = min(to, closeGrace)
		}
		_ = rc.SetWriteDeadline(time.Now().Add(to))
		if !final && isClosed(in.closed) {
			continue
		}
		if _, err := fmt.Fprintf(w, "event: stats\ndata: %s\n\n", b); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if final {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-in.closed:
		case <-tick.Chan():
		}
	}
}

// isClosed reports whether c is closed.
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// closeGrace is how long Close leaves a stream's write in progress to
// finish, on the real clock.
const closeGrace = time.Second

// graceAfterClose gives what is left to write of a stream that ended
// (the response's end, which net/http writes once the handler returned)
// closeGrace.
func graceAfterClose(rc *http.ResponseController) {
	_ = rc.SetWriteDeadline(time.Now().Add(closeGrace))
}

// canFlush reports whether w, or a writer it unwraps to, is an
// http.Flusher, as http.ResponseController looks for one.
func canFlush(w http.ResponseWriter) bool {
	for {
		switch t := w.(type) {
		case http.Flusher:
			return true
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return false
		}
	}
}

// deadLetterPage is one page of the dead-letter list.
type deadLetterPage struct {
	Total       int           `json:"total"` // matching dead letters listed
	Offset      int           `json:"offset"`
	Limit       int           `json:"limit"`
	DeadLetters []DeadLetter  `json:"deadLetters"`
	Groups      []ReasonGroup `json:"groups"`
	Reasons     int           `json:"reasons"`
}

const maxPage = 200

func (in *Inspector) serveDeadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	offset, err1 := intParam(q.Get("offset"), 0)
	limit, err2 := intParam(q.Get("limit"), 50)
	if err := errors.Join(err1, err2); err != nil || offset < 0 || limit < 1 {
		http.Error(w, "offset must be 0 or more and limit 1 or more", http.StatusBadRequest)
		return
	}
	limit = min(limit, maxPage)
	_, filter := q["reason"]
	other := q.Get("other") == "1"
	list, total := in.dead.page(q.Get("reason"), filter, other, offset, limit)
	groups, _, _, reasons := in.dead.groups(100)
	writeJSON(w, deadLetterPage{Total: total, Offset: offset, Limit: limit, DeadLetters: list, Groups: groups, Reasons: reasons})
}

func intParam(s string, def int) (int, error) {
	if s == "" {
		return def, nil
	}
	return strconv.Atoi(s)
}

func (in *Inspector) serveDeadLetter(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.Atoi(r.PathValue("id"))
	dl, ok := in.dead.get(id)
	if err != nil || !ok {
		http.Error(w, "no such dead letter", http.StatusNotFound)
		return
	}
	writeJSON(w, dl)
}

// control checks that a control request may act: the option is on and
// the request carries ControlHeader.
func control(w http.ResponseWriter, r *http.Request, allowed bool, what string) bool {
	if !allowed {
		http.Error(w, what+" is not enabled on this inspector", http.StatusForbidden)
		return false
	}
	if strings.TrimSpace(r.Header.Get(ControlHeader)) != "1" {
		http.Error(w, what+" needs the "+ControlHeader+": 1 header", http.StatusForbidden)
		return false
	}
	return true
}

func (in *Inspector) serveDrain(w http.ResponseWriter, r *http.Request) {
	in.mu.Lock()
	dr := in.drainer
	in.mu.Unlock()
	if !control(w, r, in.cfg.drain && dr != nil, "drain") {
		return
	}
	writeJSON(w, map[string]bool{"drained": dr.Drain()})
}

func (in *Inspector) serveCancel(w http.ResponseWriter, r *http.Request) {
	if !control(w, r, in.cfg.cancel != nil, "cancel") {
		return
	}
	in.cfg.cancel()
	writeJSON(w, map[string]bool{"cancelled": true})
}

var _ observer.StatsUser = (*Inspector)(nil)
var _ observer.StatsForgetter = (*Inspector)(nil)
