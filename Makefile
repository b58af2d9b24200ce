# notifier — build, test and lint.
#
#   make demo    the zero-set-up tour (embedded NATS, in-memory limits, sandbox provider)
#   make test    everything CI runs: formatting, vet, staticcheck, and the race-enabled tests
#                against real servers (private redis-server processes, embedded NATS)

GO          ?= go
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -X main.version=$(VERSION)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
PKGS        := ./...

.PHONY: all build demo test lint fmt-check vet staticcheck race fuzz bench clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/notifier ./cmd/notifier

demo:
	$(GO) run -ldflags "$(LDFLAGS)" ./cmd/notifier demo

test: lint race

lint: fmt-check vet staticcheck

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

staticcheck:
	$(GO) run $(STATICCHECK) $(PKGS)

race:
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

# Each fuzz target for a while (the checked-in seeds already run in `make test`).
FUZZTIME ?= 60s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./queue/
	$(GO) test -run '^$$' -fuzz '^FuzzParseConfig$$' -fuzztime $(FUZZTIME) ./cmd/notifier/

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count=5 $(PKGS)

clean:
	rm -rf bin
