# Tenure: `make test` is the test command (README.md); CI runs it on a clean clone.
GO        ?= go
FUZZTIME  ?= 60s
STATICCHECK ?= $(shell $(GO) env GOPATH)/bin/staticcheck

.PHONY: test test-ts test-short bench bench-cluster fuzz fuzz-short lint build run chaos chaos-short drain check sim

build:
	$(GO) build ./...

## test: the whole suite, race detector on, including a short run of every fuzz corpus.
## The browser tests of the web board (ui/) drive a headless Chromium; without one they
## are skipped, unless TENURE_REQUIRE_BROWSER=1 (.ci/run sets it), which makes its absence
## a failure. go test prints nothing about a package that passes, so the skip is said here,
## before and after the run (the names are those ui/browser_test.go's chromium() looks for).
browser_note = found=; for b in chromium chromium-browser google-chrome google-chrome-stable headless-shell; do \
	command -v $$b >/dev/null 2>&1 && found=1; done; \
	if [ "$${TENURE_REQUIRE_BROWSER:-}" != 1 ] && [ -z "$${TENURE_CHROMIUM:-}" ] && [ -z "$$found" ]; then \
	echo '*** make test: no headless Chromium on the PATH: the browser tests of the web board (ui/) are SKIPPED.' >&2; \
	echo '*** Install it with: apt-get install chromium  (or set TENURE_CHROMIUM to a Chrome or Chromium).' >&2; fi

## The adapters of package fence that link a database driver are Go modules of their own
## (so that the worker SDK links none): ./... does not enter them, so test and lint name them.
## Their tests start a PostgreSQL server (Debian's postgresql package); without one they are
## skipped, unless TENURE_REQUIRE_POSTGRES=1 (.ci/run sets it), which makes its absence a failure.
ADAPTERS := adapters/pgfence adapters/sqlitefence
postgres_note = found=; for d in /usr/lib/postgresql/*/bin; do test -x $$d/postgres && found=1; done; \
	command -v postgres >/dev/null 2>&1 && found=1; \
	if [ "$${TENURE_REQUIRE_POSTGRES:-}" != 1 ] && [ -z "$${TENURE_POSTGRES_BIN:-}" ] && [ -z "$$found" ]; then \
	echo '*** make test: no PostgreSQL server: the tests of adapters/pgfence against it are SKIPPED.' >&2; \
	echo '*** Install it with: apt-get install postgresql  (or set TENURE_POSTGRES_BIN to its bin directory).' >&2; fi

## The TypeScript worker SDK (sdk/ts) is tested with Node.js 20 or later and npm: without them
## make test skips it and says so, unless TENURE_REQUIRE_NODE=1 (.ci/run sets it), which makes
## their absence a failure.
node_ok = command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 && \
	node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' 2>/dev/null
node_note = echo '*** make test: no Node.js 20+ and npm on the PATH: the TypeScript SDK tests (sdk/ts) are SKIPPED.' >&2; \
	echo '*** Install them with: apt-get install nodejs npm  (Node.js 20 or later), then: make test-ts' >&2

test:
	@$(browser_note)
	@$(postgres_note)
	$(GO) test -race -count=1 -timeout 20m ./...
	@for m in $(ADAPTERS); do echo "cd $$m && $(GO) test -race -count=1 -timeout 20m ./..."; \
		(cd $$m && $(GO) test -race -count=1 -timeout 20m ./...) || exit 1; done
	@if $(node_ok); then $(MAKE) --no-print-directory test-ts; \
	elif [ "$${TENURE_REQUIRE_NODE:-}" = 1 ]; then echo 'make test: TENURE_REQUIRE_NODE=1 but no Node.js 20+ and npm on the PATH' >&2; exit 1; \
	else $(node_note); fi
	@$(browser_note)
	@$(postgres_note)

## test-ts: the TypeScript worker SDK (sdk/ts): its dependencies from the committed lockfile,
## the build (tsc to dist/), its tests (node --test) against a real `tenure serve`, which they
## build from this tree once, then the conformance kit's scenarios against its adapter.
test-ts:
	cd sdk/ts && npm ci --no-audit --no-fund && npm run build && npm test
	TENURE_CONFORMANCE_ADAPTER='node sdk/ts/dist/conformance-adapter.js' TENURE_CONFORMANCE_NAME=ts \
		$(GO) test -count=1 -timeout 10m -run '^TestConformance$$/^ts$$' ./conformance/

## bench: `tenure bench --quick` in both durability modes (raw JetStream baseline vs Tenure, same run;
## see BENCHMARKS.md), then the Go benchmarks of the fold (decode and encode included).
bench:
	$(GO) run ./cmd/tenure bench --quick --sync always
	$(GO) run ./cmd/tenure bench --quick --sync interval
	$(GO) test -run '^$$' -bench . -benchmem ./projector/ ./events/

## bench-cluster: throughput with 1, 2 and 4 partitions on a local 3-node cluster of real
## processes (R3 streams), next to raw JetStream on the same cluster (BENCHMARKS.md).
bench-cluster:
	$(GO) run ./cmd/tenure bench --cluster

## fuzz: every fuzz target (decoding, subject parsing, folding, archive lines, schedules and zones) for FUZZTIME each (crashers land in testdata/fuzz and become regression cases).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeInput$$' -fuzztime $(FUZZTIME) ./events/
	$(GO) test -run '^$$' -fuzz '^FuzzParseInputSubject$$' -fuzztime $(FUZZTIME) ./events/
	$(GO) test -run '^$$' -fuzz '^FuzzTokenRule$$' -fuzztime $(FUZZTIME) ./events/
	$(GO) test -run '^$$' -fuzz '^FuzzSentAt$$' -fuzztime $(FUZZTIME) ./events/
	$(GO) test -run '^$$' -fuzz '^FuzzSubmitPayload$$' -fuzztime $(FUZZTIME) ./events/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeDecisionFast$$' -fuzztime $(FUZZTIME) ./events/
	$(GO) test -run '^$$' -fuzz '^FuzzQueuePayloadDecision$$' -fuzztime $(FUZZTIME) ./events/
	$(GO) test -run '^$$' -fuzz '^FuzzFold$$' -fuzztime $(FUZZTIME) ./projector/
	$(GO) test -run '^$$' -fuzz '^FuzzLine$$' -fuzztime $(FUZZTIME) ./archive/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./cron/
	$(GO) test -run '^$$' -fuzz '^FuzzFooter$$' -fuzztime $(FUZZTIME) ./cron/tzdb/

fuzz-short:
	$(MAKE) fuzz FUZZTIME=20000x

## chaos: fault injection against real processes on loopback (internal/chaos/), each with its own
## credentials of `tenure auth init`: coordinators SIGKILLed at random points, a worker SIGSTOPped
## past its lease, the nats-server killed, a 3-node cluster's stream leaders stepped down and its
## nodes killed one at a time, while the workers run leases and a queue and a hostile worker attacks
## (its lease claims, bad inputs, floods, the board, the queue's offers refused); the streams are checked after every
## schedule and the run ends with the line `chaos: schedules=N lost=0 ... hostile=ok`. chaos-short
## is the few-minute version CI runs. CHAOSFLAGS adds flags, e.g. CHAOSFLAGS='--seed 42 --keep'.
CHAOSFLAGS ?=
chaos_run = bin=$$(mktemp -d) && trap 'rm -rf "$$bin"' EXIT && \
	$(GO) build -o "$$bin/tenure" ./cmd/tenure && \
	$(GO) build -o "$$bin/nats-server" github.com/nats-io/nats-server/v2 && \
	"$$bin/tenure" chaos --profile $(1) --nats-server "$$bin/nats-server" $(CHAOSFLAGS)

chaos:
	@$(call chaos_run,long)

chaos-short:
	@$(call chaos_run,short)

## drain: the end-to-end drain of a queue by three worker processes under SIGKILLs and a SIGSTOP
## (internal/drain/) with 10,000 jobs, with its effects in the drain's own fenced store, then
## against PostgreSQL through adapters/pgfence (every effect committed once, the audit of the
## effect receipts clean, the stale writes refused and counted); make test runs both with 1,000.
## DRAINJOBS sets the size.
DRAINJOBS ?= 10000
drain:
	@$(postgres_note)
	TENURE_DRAIN_JOBS=$(DRAINJOBS) $(GO) test -race -count=1 -timeout 30m -run '^TestDrain$$' -v ./internal/drain/
	cd adapters/pgfence && TENURE_DRAIN_JOBS=$(DRAINJOBS) $(GO) test -race -count=1 -timeout 30m -run '^TestDrainPostgres$$' -v .

## check: the exhaustive check of the lease rules (internal/modelcheck, TESTING.md): every
## interleaving of the inputs of the scopes of the "check" set (two or three workers, one or two
## jobs, the operator, ticks at each deadline's boundaries, a queue, earlier rules revisions) over
## the real fold, the seeds' rules checked on every transition; prints each scope's distinct
## states, transitions and depth, and every violation with its shortest input sequence (exit 1).
## A few minutes; make test runs the smaller "ci" set. CHECKFLAGS adds flags, e.g.
## CHECKFLAGS='-scope queue -depth 6 -v'.
CHECKFLAGS ?=
check:
	$(GO) run ./internal/modelcheck/cmd/modelcheck -scope check $(CHECKFLAGS)

## sim: the deterministic simulator (internal/sim, TESTING.md): real coordinators and simulated
## workers over a model of JetStream whose network the seed drives, with its faults (lost, late,
## duplicated and reordered replies, unknown outcomes, stalled readers, crashes, partitions,
## pauses, stale snapshots; queues in one seed in two), SIM_SEEDS seeds (default 1,000: about a
## minute on two cores), every oracle checked; a failing seed is printed with the command that
## replays it, and the coverage table of faults injected and paths reached at the end. make test runs 200 seeds and the
## mutations the simulator must catch. SIM_SEEDS=100000 make sim is the long run.
SIM_SEEDS ?= 1000
sim:
	SIM_SEEDS=$(SIM_SEEDS) $(GO) test -count=1 -timeout 0 -run '^TestSim$$' -v ./internal/sim/

## lint: gofmt, go vet, staticcheck.
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo 'gofmt needed'; exit 1)
	$(GO) vet ./...
	@test -x $(STATICCHECK) || $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	$(STATICCHECK) ./...
	@for m in $(ADAPTERS); do (cd $$m && $(GO) vet ./... && $(STATICCHECK) ./...) || exit 1; done
