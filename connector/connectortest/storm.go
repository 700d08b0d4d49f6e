package connectortest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The consumer process of the poison storm runs crashChild in its storm
// mode, and runs its pipeline again after each failed run, up to
// stormRuns runs.
const (
	stormMode = "storm"
	stormRuns = 100
	// stormProcTimeout bounds one consumer process: a healthy one ends in
	// a few seconds.
	stormProcTimeout = time.Minute
)

// stormSize returns the poison storm's size: good messages, poison ones
// spread among them, and how many of those end the consumer's process
// when stored (os.Exit, SIGKILL, an unrecovered panic, os.Exit); the
// others fail their run. Each poison message costs a failed run (and each
// crashing one two processes), which on NATS waits for the pull request
// given up (PullWait) and a crash for the ack wait: without ChaosEnv the
// storm is a quarter of its size, with one crashing message.
func stormSize() (good, poison, crashing int) {
	if os.Getenv(ChaosEnv) == "1" {
		return 2000, 20, 4
	}
	return 500, 5, 1
}

// stormMessages returns the storm's keys in publishing order, and its
// poison keys: "poison-NN" fail their run, "crash-…" end the process.
func stormMessages() (all, failing, crashing []string) {
	good, poison, crashers := stormSize()
	all = keys(good)
	kinds := []string{"crash-exit", "crash-kill", "crash-panic", "crash-exit"}
	for i := poison - 1; i >= 0; i-- {
		var k string
		if i%(poison/crashers) == 2 {
			k = fmt.Sprintf("%s-%02d", kinds[len(crashing)], i)
			crashing = append(crashing, k)
		} else {
			k = fmt.Sprintf("poison-%02d", i)
			failing = append(failing, k)
		}
		// Evenly spread, with neighbours on both sides of each.
		all = slices.Insert(all, (i+1)*good/(poison+1), k)
	}
	return all, failing, crashing
}

// poisonStorm publishes 2,000 good messages and 20 poison ones among
// them (a quarter of it without ChaosEnv: see stormSize): 16 fail the run
// they are in (their node's failure action is Fail, so each failure ends
// the run with neighbours in flight) and 4 end the consumer's process
// (os.Exit, SIGKILL, an unrecovered panic), with the poison guard at
// MaxDeliveries 1 and a crash ledger. A consumer process
// runs its pipeline again after each failed run, and a new process is
// started after each crash, until every message was stored or
// dead-lettered. Every good message is stored through an idempotent
// store, and handed to it again only as a failed run or a crash gave back
// what was in flight (a prefetch each, in all); none is dead-lettered (no
// neighbour is condemned), every poison message is dead-lettered once (a
// crashing one with "crashed the consumer" in its reason, after at most
// two crashes, a failing one without), and the queue ends empty.
func poisonStorm[M any](t testing.TB, h Harness[M]) {
	ctx := caseContext(t)
	dir := t.TempDir()
	cfg := SourceConfig{Queue: queueName(t), Prefetch: 32, MaxDeliveries: 1, CrashLedger: filepath.Join(dir, "crash.ledger")}
	h.CreateQueue(t, cfg)
	all, failing, crashing := stormMessages()
	h.Publish(t, cfg.Queue, messages(all...)...)

	stored, dead, crashed := filepath.Join(dir, "stored"), filepath.Join(dir, "dead"), filepath.Join(dir, "crashes")
	delivered, failedRuns := filepath.Join(dir, "delivered"), filepath.Join(dir, "runs")
	env := map[string]string{
		childMode: stormMode, childQueue: cfg.Queue, childPrefetch: strconv.Itoa(cfg.Prefetch),
		childMaxDeliv: strconv.Itoa(cfg.MaxDeliveries), childLedger: cfg.CrashLedger,
		childOut: stored, childDead: dead, childCrashes: crashed, childTotal: strconv.Itoa(len(all)),
		childDelivered: delivered, childRuns: failedRuns,
	}
	crashes, procs := 0, 0
	maxProcs := 2*len(crashing) + 2
	for {
		if procs == maxProcs {
			require.FailNow(t, "the queue is not done", "after %d consumer processes: %d stored, dead letters %v",
				maxProcs, len(readKeys(t, stored)), readDead(t, dead))
		}
		procs++
		procCtx, cancel := context.WithTimeout(ctx, stormProcTimeout)
		code, stderr := runCrashChild(procCtx, t, env)
		cancel()
		if code == 0 {
			break
		}
		require.Contains(t, []int{exitCrash, exitPanic, exitKill}, code, "consumer process %d ended with %d:\n%s", procs, code, stderr)
		crashes++
	}
	t.Logf("%d consumer processes, %d of them crashed", procs, crashes)

	got := readKeys(t, stored)
	good := all[:0:0]
	for _, k := range all {
		if strings.HasPrefix(k, "m-") {
			good = append(good, k)
		}
	}
	assert.Len(t, got, len(good), "every good message is stored")
	for _, k := range good {
		// The store is idempotent (it drops a key it has): this fails
		// only for a message never stored. Deliveries are counted below.
		assert.Equal(t, 1, got[k], "message %s is in the idempotent store", k)
	}
	// What the store was handed, before it dropped a key it had: each good
	// message at least once, and again only as a failed run or a crash
	// gave back what was in flight, at most a prefetch each.
	deliveries, runs := readKeys(t, delivered), len(readKeys(t, failedRuns))
	total, again := 0, 0
	for _, k := range good {
		assert.Positive(t, deliveries[k], "message %s was delivered to the store", k)
		total += deliveries[k]
		again += max(deliveries[k]-1, 0)
	}
	allowed := cfg.Prefetch * (runs + crashes)
	t.Logf("%d deliveries of %d good messages, %d of them again; %d failed runs and %d crashes allow %d (a prefetch each)",
		total, len(good), again, runs, crashes, allowed)
	assert.LessOrEqual(t, again, allowed,
		"good messages are delivered again only as a failed run or a crash gives back what was in flight: at most a prefetch (%d) for each of the %d failed runs and %d crashes",
		cfg.Prefetch, runs, crashes)
	letters := readDead(t, dead)
	var deadKeys []string
	for k, reasons := range letters {
		deadKeys = append(deadKeys, k)
		assert.Zero(t, got[k], "message %s is dead-lettered and stored", k)
		if !assert.Len(t, reasons, 1, "message %s is dead-lettered once", k) {
			continue
		}
		if slices.Contains(crashing, k) {
			assert.Contains(t, reasons[0], "crashed the consumer", "the reason of %s", k)
		} else {
			assert.NotContains(t, reasons[0], "crashed the consumer", "%s failed its runs, it crashed nothing", k)
		}
	}
	assert.ElementsMatch(t, append(slices.Clone(failing), crashing...), deadKeys,
		"the poison messages, and no neighbour, are dead-lettered")
	n := 0
	for k, c := range readKeys(t, crashed) {
		n += c
		assert.Contains(t, crashing, k)
		assert.LessOrEqual(t, c, 2, "%s ends at most two processes: once among its neighbours, once alone", k)
	}
	assert.Equal(t, crashes, n, "each crash was a crashing message's")
	requirePending(t, h, cfg.Queue, 0, "nothing is left in the queue")
}
