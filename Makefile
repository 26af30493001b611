# guard: build, test, fuzz, benchmark, demo.
GO       ?= go
# An execution count, not a duration: with a duration, Go 1.26's fuzz
# coordinator can fail a clean run with "context deadline exceeded" when the
# deadline races a busy worker (golang/go#75804, fixed in Go 1.27).
FUZZTIME ?= 30000x
BIN      := bin

.PHONY: all build vet test unit fuzz bench run ci clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/guardd ./cmd/guardctl

vet:
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./...

unit:
	$(GO) test -race -count=1 ./...

# Every fuzz target, briefly. Seeds come from each package's testdata.
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$target ($(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

# The whole test suite: what CI runs.
test: vet unit fuzz

# Benchmarks print ratios against a baseline measured in the same run.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./firewall
	$(GO) test -run '^$$' -bench . -benchmem ./consent
	$(GO) test -run '^$$' -bench . -benchmem ./classify
	$(GO) test -run '^$$' -bench . -benchtime 2s ./proxy
	$(GO) test -run '^$$' -bench . -benchtime 3x ./netstack   # needs root: namespaces

# Start guardd on the embedded demo profile and tour guardctl against it.
run: build
	./scripts/demo.sh $(BIN)

ci:
	bash .ci/run

clean:
	rm -rf $(BIN)
