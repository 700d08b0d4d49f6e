# Sluice's tasks. Everything here needs only Go: tools are fetched by `go run`.
# The repository holds several modules, joined by go.work (docs/modules.md);
# ALL names the packages of every module of the workspace, so that one go
# command builds and tests them all. (`./...` would stop at the nested
# modules' go.mod files and cover the core module only.)
GO        ?= go
FUZZTIME  ?= 10s
SOAK      ?= 10m
SOAK_OUT  ?= soak-report
STATICCHECK = honnef.co/go/tools/cmd/staticcheck@v0.8.2
ALL       = github.com/sluicehq/sluice/...

.PHONY: all test chaos soak demo tour docs bench compare fuzz lint tidy api

all: lint test

## test: every test of every module with the race detector, and go test's
## own vet checks (printf, errorsas, tests and the rest of its list) on the
## same build; the whole `go vet` runs in `make lint`, since beside the race
## build it compiles every package a second time (112 s of a 418 s clean-clone
## run on this project's 2-core machine). Four
## test binaries run at once (go's default is one per core): the broker and
## crash tests spend most of their time waiting on a server or a child
## process, and would otherwise keep a core idle. SLOW names the packages
## whose tests take longest: go builds and starts test binaries in the
## order it is given the packages, and one of these started last would run
## alone at the end.
TESTP ?= 4
SLOW  = $(addprefix github.com/sluicehq/sluice/,pipeline samples/etl connector/nats internal/e2e connector/connectortest connector/rabbitmq connector/kafka)
test:
	$(GO) test -race -count=1 -p $(TESTP) $(SLOW) $(ALL)

## chaos: the connectors' conformance suites with every case of their fault
## mode (each fault against the source and the publisher) and the full-size
## poison storm; `make test` runs a short subset that SLUICE_FAULT_SEED
## picks (docs/connectors.md). Needs the brokers.
CHAOS = $(addprefix github.com/sluicehq/sluice/,$(patsubst %/,%,$(dir $(wildcard connector/*/conformance_test.go))))
chaos:
	SLUICE_CHAOS=1 $(GO) test -race -count=1 -p 1 -timeout=30m -run '^(TestConformance|TestSlowLinkIsNotADeadLink)$$' $(CHAOS)

## soak: the broker pipeline (Kafka on kfake, through the fault proxy, with a
## child consumer SIGKILLed now and then) and the ETL pipeline, together under a
## seeded mix of faults for SOAK (any Go duration), then a verdict on the items
## and on the growth of heap, RSS, goroutines and open files, in SOAK_OUT
## (report.md and SVG plots); it fails when the verdict does (docs/performance.md).
soak:
	$(GO) run ./bench/soak -duration $(SOAK) -out $(SOAK_OUT) $(SOAK_FLAGS)

## demo: the ETL job on embedded defaults (SQLite and a dead-letter file in ./sluice-demo).
demo:
	$(GO) run ./samples/etl

## tour: the retry curves and jitter, printed.
tour:
	$(GO) run ./samples/retrydelay

## docs: regenerate the pipeline graphs that docs/graph.md embeds (one
## package at a time: each rewrites the page).
docs:
	UPDATE_DOCS=1 $(GO) test -p 1 -count=1 -run '^TestDocGraph$$' ./samples/...

## bench: every benchmark beside its hand-written baseline, summarised by benchstat;
## the connectors beside their brokers' clients (skipped without the brokers), and
## connector/sql beside hand-written database/sql loops on SQLite.
BENCHSTAT = golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
bench:
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=1000000x -count=6 ./bench/ | tee bench.out
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=1s -count=6 ./deadletter/ | tee -a bench.out
	$(GO) test -run='^$$' -bench=. -benchtime=1x -count=3 -timeout=30m ./bench/flaky/ | tee -a bench.out
	$(GO) test -c -o bench.connectors.test ./bench/connectors/
	for i in 1 2 3 4 5 6; do ./bench.connectors.test -test.run='^$$' -test.bench=. -test.benchtime=10000x; done | tee -a bench.out
	rm -f bench.connectors.test
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=3x -count=6 ./connector/sql/ | tee -a bench.out
	$(GO) run $(BENCHSTAT) -table .name -col /impl bench.out

## compare: Sluice beside other Go libraries on the same workload (its own
## module in bench/compare, so that they stay out of Sluice's go.mod).
compare:
	cd bench/compare && $(GO) test -run='^$$' -bench='Compare|Depth' -benchmem -benchtime=1000000x -count=6 -timeout=60m . | tee ../../compare.out
	cd bench/compare && $(GO) test -run='^$$' -bench=Memory -benchmem -benchtime=1x -count=6 . | tee -a ../../compare.out
	$(GO) run $(BENCHSTAT) -col /impl compare.out

## fuzz: a short run of every fuzz target (FUZZTIME each).
fuzz:
	@set -e; for pkg in $$($(GO) list $(ALL)); do \
		for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "fuzz $$pkg $$target"; \
			$(GO) test -run='^$$' -fuzz="^$$target$$" -fuzztime=$(FUZZTIME) $$pkg; \
		done; \
	done

## api: rewrite every module's api.txt (its exported names, generated).
api:
	$(GO) run ./internal/apitxt

## lint: formatting, vet and staticcheck of every module, every api.txt up to
## date, and the check that the core module requires nothing beyond
## clockwork, x/sync and goleak.
lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) run ./internal/apitxt -check
	$(GO) vet $(ALL)
	$(GO) run $(STATICCHECK) $(ALL)
	.ci/modcheck

## tidy: go mod tidy in every module, each on its own (GOWORK=off; the
## nested modules' replace lines point at the checkout), as a user's build
## would see it. The modules are git's list of go.mod files (find's outside
## a checkout). Use this, not `go work sync`, which writes the workspace's
## versions into the core go.mod (docs/modules.md).
tidy:
	@set -e; for mod in $$(. .ci/gomod.sh && gomods); do \
		dir=$$(dirname $$mod); echo "tidy $$dir"; \
		(cd $$dir && GOWORK=off GOFLAGS=-mod=mod $(GO) mod tidy); \
	done
