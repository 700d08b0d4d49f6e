package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/connector/connectortest"
)

// procTB lets a program use connectortest.NewProxy, which reports its
// set-up failure and registers its Close through a testing.TB.
type procTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
}

func (*procTB) Helper()                        {}
func (*procTB) Errorf(format string, a ...any) { fmt.Fprintf(os.Stderr, "soak: "+format+"\n", a...) }
func (*procTB) FailNow()                       { panic("soak: proxy set-up failed") }
func (t *procTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}
func (t *procTB) cleanup() {
	t.mu.Lock()
	fs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// A result is what a soak did, for the report.
type result struct {
	cfg       config
	start     time.Time
	elapsed   time.Duration
	samples   []sample
	faults    map[string]int // applied, by kind
	restarts  int            // of the in-process consumer's pipeline, after it failed
	childEnds int            // child consumers that ended by themselves (not killed)
	etlCycles int
	verdict   verdict
	// interrupted says a signal (SIGINT, SIGTERM) ended the run before its
	// duration: the report shows what was sampled, and the verdict fails.
	interrupted bool
	// rejudged is the samples.csv judged again (-judge); empty for a run.
	rejudged string
	// quietFrom is when the faults stopped, hours since the start; 0:
	// three quarters of the last sample's time.
	quietFrom float64
}

// run runs the soak of cfg and writes its report.
func run(ctx context.Context, cfg config, logf func(string, ...any)) (verdict, error) {
	res := result{cfg: cfg, start: time.Now(), faults: map[string]int{}}
	broker, addr, err := startBroker()
	if err != nil {
		return verdict{}, err
	}
	defer broker.stop(10 * time.Second)
	const topic, group = "soak", "soak"
	if err := createTopic(ctx, addr, topic, int32(cfg.partitions)); err != nil {
		return verdict{}, err
	}
	tb := &procTB{}
	defer tb.cleanup()
	proxy := connectortest.NewProxy(tb, addr)
	logf("broker %s, proxy %s; seed %d, %s", addr, proxy.Addr(), cfg.seed, cfg.duration)

	fl := newFlaky(cfg.seed)
	bk := &books{poison: fl.poison}
	bk.reserve(int(cfg.duration.Seconds()*float64(cfg.rate)*1.1) + cfg.rate)
	runCtx, stopRun := context.WithTimeout(ctx, cfg.duration)
	defer stopRun()

	// The sampler, until the very end.
	var (
		sampMu  sync.Mutex
		samples []sample
	)
	sampDone := make(chan struct{})
	stopSampling := make(chan struct{})
	go func() {
		defer close(sampDone)
		t := time.NewTicker(cfg.every)
		defer t.Stop()
		for {
			s := read(time.Since(res.start))
			sampMu.Lock()
			samples = append(samples, s)
			sampMu.Unlock()
			select {
			case <-stopSampling:
				return
			case <-t.C:
			}
		}
	}()

	var wg sync.WaitGroup
	var mu sync.Mutex // guards what the goroutines below report
	var errs []error
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		stopRun()
	}

	// The in-process consumer, run again when its pipeline fails.
	stopping := make(chan struct{})
	var (
		curMu  sync.Mutex
		curSrc interface{ Stop() }
	)
	wg.Go(func() {
		for {
			src, p, err := consumer(proxy.Addr(), topic, group, fl, bk.deliver, bk.deadLetter)
			if err != nil {
				fail(fmt.Errorf("consumer: %w", err))
				return
			}
			curMu.Lock()
			select {
			case <-stopping:
				curMu.Unlock()
				return
			default:
			}
			curSrc = src
			curMu.Unlock()
			_, err = p.Run(context.WithoutCancel(ctx))
			select {
			case <-stopping:
				if err != nil {
					logf("consumer ended: %v", err)
				}
				return
			default:
			}
			mu.Lock()
			res.restarts++
			mu.Unlock()
			logf("consumer pipeline ended (%v); run again", err)
			time.Sleep(time.Second)
		}
	})

	// The child consumer, SIGKILLed and started again on kill events.
	kills := make(chan time.Duration)
	wg.Go(func() {
		for {
			c, err := startChild("-consumer", "-via", proxy.Addr(), "-topic", topic, "-group", group, "-seed", strconv.FormatUint(cfg.seed, 10))
			if err != nil {
				fail(fmt.Errorf("child consumer: %w", err))
				return
			}
			read := c.feed(bk.deliver, bk.deadLetter)
			go func() { c.done <- c.cmd.Wait() }()
			select {
			case pause := <-kills:
				_ = c.cmd.Process.Signal(syscall.SIGKILL)
				<-c.done
				<-read
				time.Sleep(pause)
			case <-stopping:
				c.stop(time.Minute)
				<-read
				return
			case err := <-c.done:
				<-read
				mu.Lock()
				res.childEnds++
				mu.Unlock()
				logf("child consumer ended: %v; start again", err)
				time.Sleep(time.Second)
			}
		}
	})

	// The faults.
	wg.Go(func() {
		for _, e := range schedule(cfg.seed, cfg.duration, cfg.faultGap) {
			select {
			case <-runCtx.Done():
				return
			case <-time.After(time.Until(res.start.Add(e.At))):
			}
			wait := func() {
				select {
				case <-time.After(e.Lasts):
				case <-runCtx.Done():
				}
			}
			switch e.Kind {
			case faultKill:
				select {
				case kills <- e.Lasts:
				case <-runCtx.Done():
					return
				}
			default:
				injectFault(proxy, e.Kind)
				wait()
				proxy.Clear()
			}
			mu.Lock()
			res.faults[e.Kind]++
			mu.Unlock()
		}
	})

	// The producer and the ETL loop, for the duration.
	var produced int
	wg.Go(func() {
		n, err := produce(runCtx, addr, topic, cfg.rate)
		mu.Lock()
		produced = n
		mu.Unlock()
		if err != nil {
			fail(err)
		}
	})
	var etl account
	wg.Go(func() {
		a, n, err := etlLoop(runCtx, os.TempDir()+"/sluice-soak-"+strconv.Itoa(os.Getpid()), cfg.etlRows, fl, logf)
		mu.Lock()
		etl, res.etlCycles = a, n
		mu.Unlock()
		if err != nil {
			fail(err)
		}
	})

	<-runCtx.Done()
	logf("duration over; draining")
	// Wait for the producer's count, then for every item to be accounted.
	deadline := time.Now().Add(cfg.drain)
	for ctx.Err() == nil { // interrupted: no drain
		mu.Lock()
		n := produced
		mu.Unlock()
		if (n > 0 && bk.done() >= n) || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The sampling ends with the drain, before the pipelines are torn
	// down: a sample of the teardown (consumers stopping, their
	// goroutines and files let go) would fall in the quiet tail and could
	// hide a leak there.
	close(stopSampling)
	<-sampDone
	close(stopping)
	curMu.Lock()
	if curSrc != nil {
		curSrc.Stop()
	}
	curMu.Unlock()
	wg.Wait()
	_ = os.RemoveAll(os.TempDir() + "/sluice-soak-" + strconv.Itoa(os.Getpid()))
	res.elapsed = time.Since(res.start)
	res.samples = samples
	res.interrupted = ctx.Err() != nil
	if len(errs) > 0 && !res.interrupted {
		return verdict{}, errs[0]
	}
	ka := bk.account("kafka", produced, true)
	applied := 0
	for _, n := range res.faults {
		applied += n
	}
	ka.allowed = allowance(applied+res.restarts+res.childEnds, 2, consumerWindow, consumerRestarts)
	accounts := []account{ka, etl}
	res.quietFrom = (cfg.duration * 3 / 4).Hours()
	res.verdict = decide(accounts, withQuiet(seriesOf(samples), res.quietFrom))
	if applied == 0 {
		res.verdict.problems = append(res.verdict.problems, fmt.Sprintf("no fault was applied: a run of %s with -fault-gap %s schedules none", cfg.duration, cfg.faultGap))
	}
	if res.interrupted {
		res.verdict.problems = append(res.verdict.problems, fmt.Sprintf("interrupted (%v) after %s of %s: not a verdict of the run", context.Cause(ctx), res.elapsed.Round(time.Second), cfg.duration))
		for _, err := range errs {
			res.verdict.problems = append(res.verdict.problems, "while interrupted: "+err.Error())
		}
	}
	if err := writeReport(cfg.out, res); err != nil {
		return res.verdict, err
	}
	return res.verdict, nil
}
