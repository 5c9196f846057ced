# Tenure: `make test` is the test command (README.md); CI runs it on a clean clone.
GO        ?= go
FUZZTIME  ?= 60s
STATICCHECK ?= $(shell $(GO) env GOPATH)/bin/staticcheck

.PHONY: test test-short bench fuzz fuzz-short lint build run

build:
	$(GO) build ./...

## test: the whole suite, race detector on, including a short run of every fuzz corpus.
test:
	$(GO) test -race -count=1 -timeout 20m ./...

## bench: Go benchmarks (fold including decode).
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./projector/ ./events/

## fuzz: every fuzz target for FUZZTIME each (crashers land in testdata/fuzz and become regression cases).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeInput$$' -fuzztime $(FUZZTIME) ./events/
	$(GO) test -run '^$$' -fuzz '^FuzzFold$$' -fuzztime $(FUZZTIME) ./projector/

fuzz-short:
	$(MAKE) fuzz FUZZTIME=10s

## lint: gofmt, go vet, staticcheck.
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo 'gofmt needed'; exit 1)
	$(GO) vet ./...
	@test -x $(STATICCHECK) || $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	$(STATICCHECK) ./...
