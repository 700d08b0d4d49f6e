// Package compare_test measures Sluice beside other Go libraries that can
// carry the same workload, in one run, so that ratios are fair. It lives in
// its own module so that the libraries it compares with stay out of
// Sluice's go.mod.
//
// Each benchmark in BenchmarkCompare and BenchmarkDepth moves b.N ints through
// source → transform → sink, so ns/op is ns per item; sub-benchmarks are named
// impl=<name> so that benchstat -col /impl puts them side by side:
//
//	go test -run='^$' -bench='Compare|Depth' -benchmem -benchtime=1000000x -count=6 .
//	go test -run='^$' -bench=Memory -benchmem -benchtime=1x -count=6 .
//
// BenchmarkMemory moves a fixed memItems items per op, so run it with
// -benchtime=1x.
package compare_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/sourcegraph/conc/stream"
	kitsune "github.com/zenbaku/go-kitsune"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/pipeline"
)

var sinkSum int

// want is the sum every variant must reach: Σ_{i<n} (i*mul + add).
func want(n, mul, add int) int { return mul*(n*(n-1)/2) + add*n }

func check(b *testing.B, got, exp int) {
	b.Helper()
	if got != exp {
		b.Fatalf("sum = %d, want %d", got, exp)
	}
	sinkSum = got
}

// noLeaks runs bench and then fails if goroutines started during it are
// still alive once goleak has given them time to end (Watermill's, for one,
// end a little after Close returns). Every variant must shut down fully.
func noLeaks(bench func(*testing.B)) func(*testing.B) {
	return func(b *testing.B) {
		current := goleak.IgnoreCurrent()
		bench(b)
		b.StopTimer()
		if err := goleak.Find(current); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func double(_ context.Context, x int) (int, error) { return x * 2, nil }

// BenchmarkCompare moves b.N ints through source → x*2 → sum with each
// library, written as its documentation shows.
func BenchmarkCompare(b *testing.B) {
	b.Run("impl=handwritten", noLeaks(handChannels))
	b.Run("impl=sluice", noLeaks(sluiceDefault))
	b.Run("impl=kitsune", noLeaks(kitsuneDefault))
	b.Run("impl=conc", noLeaks(concStream))
	b.Run("impl=failsafe", noLeaks(failsafeRetry))
	b.Run("impl=watermill", noLeaks(func(b *testing.B) { watermillRouter(b, gochannel.Config{}) }))
	// Not one of the libraries' defaults: GoChannel with publish blocking
	// until the subscriber acks, which bounds memory (see watermillRouter).
	b.Run("impl=watermill-blockack", noLeaks(func(b *testing.B) {
		watermillRouter(b, gochannel.Config{BlockPublishUntilSubscriberAck: true})
	}))
}

// handChannels is a source, a transform and a sink written by hand as three
// goroutines joined by channels of 64 items (bench.handChannels).
func handChannels(b *testing.B) {
	b.ReportAllocs()
	n := b.N
	b.ResetTimer()
	a := make(chan int, 64)
	c := make(chan int, 64)
	done := make(chan int)
	go func() {
		for i := range n {
			a <- i
		}
		close(a)
	}()
	go func() {
		for v := range a {
			c <- v * 2
		}
		close(c)
	}()
	go func() {
		s := 0
		for v := range c {
			s += v
		}
		done <- s
	}()
	check(b, <-done, want(n, 2, 0))
}

// sluiceDefault is Sluice's default pipeline (bench.runEngine with no options).
func sluiceDefault(b *testing.B) {
	b.ReportAllocs()
	n := b.N
	bl := pipeline.New("bench")
	src := pipeline.Source(bl, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		for i := range n {
			if err := out.Emit(ctx, i); err != nil {
				return err
			}
		}
		return nil
	}))
	dbl := pipeline.Transform(bl, "double", src, node.TransformFunc[int, int](double))
	s := 0
	pipeline.Sink(bl, "sum", dbl, node.SinkFunc[int](func(_ context.Context, x int) error { s += x; return nil }))
	p, err := bl.Build()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	if _, err := p.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	check(b, s, want(n, 2, 0))
}

// kitsuneDefault is Generate → Map → ForEach with kitsune's defaults (its
// README's quick start). With defaults kitsune fuses Map into the ForEach
// goroutine, so this is two goroutines joined by one channel of 16.
func kitsuneDefault(b *testing.B) {
	b.ReportAllocs()
	n := b.N
	b.ResetTimer()
	src := kitsune.Generate(func(_ context.Context, yield func(int) bool) error {
		for i := range n {
			if !yield(i) {
				return nil
			}
		}
		return nil
	})
	dbl := kitsune.Map(src, double)
	s := 0
	if _, err := dbl.ForEach(func(_ context.Context, x int) error { s += x; return nil }).Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	check(b, s, want(n, 2, 0))
}

// concStream submits one task per item to an ordered conc stream; the task
// doubles, its callback (run in order, on one goroutine) sums. The pool size
// of 10 is the one in conc's README mapStream example.
func concStream(b *testing.B) {
	b.ReportAllocs()
	n := b.N
	b.ResetTimer()
	s := 0
	st := stream.New().WithMaxGoroutines(10)
	for i := range n {
		st.Go(func() stream.Callback {
			v := i * 2
			return func() { s += v }
		})
	}
	st.Wait()
	check(b, s, want(n, 2, 0))
}

// failsafeRetry is handChannels with the transform's call wrapped in a
// failsafe-go retry policy (3 retries, no delay; nothing ever fails), as a user
// who adds failsafe-go to hand-written code would write it. The policy and
// its executor are built once; each item is one executor.Get.
func failsafeRetry(b *testing.B) {
	b.ReportAllocs()
	n := b.N
	rp := retrypolicy.NewBuilder[int]().WithMaxRetries(3).Build()
	exec := failsafe.With(rp)
	b.ResetTimer()
	a := make(chan int, 64)
	c := make(chan int, 64)
	done := make(chan int)
	errc := make(chan error, 1)
	go func() {
		for i := range n {
			a <- i
		}
		close(a)
	}()
	go func() {
		defer close(c)
		for v := range a {
			r, err := exec.Get(func() (int, error) { return double(context.Background(), v) })
			if err != nil {
				errc <- err
				for range a {
				}
				return
			}
			c <- r
		}
	}()
	go func() {
		s := 0
		for v := range c {
			s += v
		}
		done <- s
	}()
	s := <-done
	select {
	case err := <-errc:
		b.Fatal(err)
	default:
	}
	check(b, s, want(n, 2, 0))
}

// watermillRouter publishes every item as a message on topic "in" of a
// GoChannel pub/sub; a Router handler doubles it onto topic "out" and a
// consumer handler sums. This is the setup of Watermill's getting-started
// guide (NewGoChannel with a zero Config, NewRouter, AddHandler,
// AddConsumerHandler — AddNoPublisherHandler is its deprecated name).
//
// With the zero Config, GoChannel.Publish never blocks: it starts two
// goroutines per message per subscriber, which wait for the subscriber to
// take the message and ack it, and the Router starts one more goroutine per
// message it handles. So nothing pushes back on the source: the messages
// published faster than they are handled pile up as parked goroutines.
// BlockPublishUntilSubscriberAck makes Publish wait for the ack instead.
func watermillRouter(b *testing.B, cfg gochannel.Config) {
	b.ReportAllocs()
	n := b.N
	logger := watermill.NopLogger{}
	pubSub := gochannel.NewGoChannel(cfg, logger)
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		b.Fatal(err)
	}
	router.AddHandler("double", "in", pubSub, "out", pubSub, func(msg *message.Message) ([]*message.Message, error) {
		x, err := strconv.Atoi(string(msg.Payload))
		if err != nil {
			return nil, err
		}
		return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(x*2)))}, nil
	})
	// The router runs each message's handler in its own goroutine, so the
	// sum is shared between goroutines.
	var (
		mu    sync.Mutex
		s     int
		count int
	)
	done := make(chan struct{})
	router.AddConsumerHandler("sum", "out", pubSub, func(msg *message.Message) error {
		x, err := strconv.Atoi(string(msg.Payload))
		if err != nil {
			return err
		}
		mu.Lock()
		s += x
		count++
		if count == n {
			close(done)
		}
		mu.Unlock()
		return nil
	})
	runErr := make(chan error, 1)
	go func() { runErr <- router.Run(context.Background()) }()
	<-router.Running()

	b.ResetTimer()
	for i := range n {
		if err := pubSub.Publish("in", message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))); err != nil {
			b.Fatal(err)
		}
	}
	<-done
	b.StopTimer()

	if err := router.Close(); err != nil {
		b.Fatal(err)
	}
	if err := <-runErr; err != nil {
		b.Fatal(err)
	}
	if err := pubSub.Close(); err != nil {
		b.Fatal(err)
	}
	mu.Lock()
	got := s
	mu.Unlock()
	check(b, got, want(n, 2, 0))
}

// BenchmarkDepth moves b.N ints through a source, a chain of k transforms
// x+1 and a summing sink, hand-written and with Sluice's defaults.
func BenchmarkDepth(b *testing.B) {
	for _, k := range []int{3, 10, 30} {
		b.Run(fmt.Sprintf("stages=%d/impl=handwritten", k), noLeaks(func(b *testing.B) { handChain(b, k) }))
		b.Run(fmt.Sprintf("stages=%d/impl=sluice", k), noLeaks(func(b *testing.B) { sluiceChain(b, k) }))
	}
}

func handChain(b *testing.B, k int) {
	b.ReportAllocs()
	n := b.N
	b.ResetTimer()
	in := make(chan int, 64)
	go func() {
		for i := range n {
			in <- i
		}
		close(in)
	}()
	c := in
	for range k {
		out := make(chan int, 64)
		go func(in <-chan int) {
			for v := range in {
				out <- v + 1
			}
			close(out)
		}(c)
		c = out
	}
	s := 0
	for v := range c {
		s += v
	}
	check(b, s, want(n, 1, k))
}

func inc(_ context.Context, x int) (int, error) { return x + 1, nil }

func sluiceChain(b *testing.B, k int) {
	b.ReportAllocs()
	n := b.N
	bl := pipeline.New("depth")
	st := pipeline.Source(bl, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		for i := range n {
			if err := out.Emit(ctx, i); err != nil {
				return err
			}
		}
		return nil
	}))
	for j := range k {
		st = pipeline.Transform(bl, "inc"+strconv.Itoa(j), st, node.TransformFunc[int, int](inc))
	}
	s := 0
	pipeline.Sink(bl, "sum", st, node.SinkFunc[int](func(_ context.Context, x int) error { s += x; return nil }))
	p, err := bl.Build()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	if _, err := p.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	check(b, s, want(n, 1, k))
}

// memItems is how many items BenchmarkMemory moves per op; override with
// COMPARE_MEM_ITEMS.
var memItems = func() int {
	if v, err := strconv.Atoi(os.Getenv("COMPARE_MEM_ITEMS")); err == nil && v > 0 {
		return v
	}
	return 10_000_000
}()

// slowSink is the per-item work of BenchmarkMemory's sink: it yields the
// processor, so the sink is the bottleneck and every buffer upstream fills.
func slowSink(s *int, x int) {
	runtime.Gosched()
	*s += x
}

// BenchmarkMemory moves memItems items per op (run it with -benchtime=1x)
// through source → x*2 → a slow sink, and reports the peak heap seen while
// they flow and the goroutines the run added per node.
func BenchmarkMemory(b *testing.B) {
	b.Run("impl=handwritten", noLeaks(func(b *testing.B) { measure(b, handSlow) }))
	b.Run("impl=sluice", noLeaks(func(b *testing.B) { measure(b, sluiceSlow) }))
}

const memNodes = 3 // source, transform, sink

// measure runs run(n) b.N times while a goroutine samples the heap and the
// goroutine count every 2 ms, and reports their peaks.
func measure(b *testing.B, run func(b *testing.B, n int) int) {
	b.ReportAllocs()
	runtime.GC()
	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	stop := make(chan struct{})
	sampled := make(chan struct{})
	var peakHeap, peakG atomic.Uint64
	sample := func() {
		metrics.Read(samples)
		if v := samples[0].Value.Uint64(); v > peakHeap.Load() {
			peakHeap.Store(v)
		}
		if g := uint64(runtime.NumGoroutine()); g > peakG.Load() {
			peakG.Store(g)
		}
	}
	go func() {
		defer close(sampled)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				sample()
			}
		}
	}()
	before := runtime.NumGoroutine() // includes the sampler
	sample()
	peakG.Store(uint64(before))
	b.ResetTimer()
	for range b.N {
		check(b, run(b, memItems), want(memItems, 2, 0))
	}
	b.StopTimer()
	close(stop)
	<-sampled
	b.ReportMetric(float64(peakHeap.Load()), "peak-heap-B")
	b.ReportMetric(float64(peakG.Load()-uint64(before))/memNodes, "goroutines/node")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(memItems), "ns/item")
}

func handSlow(_ *testing.B, n int) int {
	a := make(chan int, 64)
	c := make(chan int, 64)
	done := make(chan int)
	go func() {
		for i := range n {
			a <- i
		}
		close(a)
	}()
	go func() {
		for v := range a {
			c <- v * 2
		}
		close(c)
	}()
	go func() {
		s := 0
		for v := range c {
			slowSink(&s, v)
		}
		done <- s
	}()
	return <-done
}

func sluiceSlow(b *testing.B, n int) int {
	bl := pipeline.New("memory")
	src := pipeline.Source(bl, "src", node.SourceFunc[int](func(ctx context.Context, out node.Emitter[int]) error {
		for i := range n {
			if err := out.Emit(ctx, i); err != nil {
				return err
			}
		}
		return nil
	}))
	dbl := pipeline.Transform(bl, "double", src, node.TransformFunc[int, int](double))
	s := 0
	pipeline.Sink(bl, "sum", dbl, node.SinkFunc[int](func(_ context.Context, x int) error { slowSink(&s, x); return nil }))
	p, err := bl.Build()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := p.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	return s
}
