# notifier — build, test and lint.
#
#   make install the notifier command into $(go env GOPATH)/bin, stamped with its version
#   make demo    the zero-set-up tour (embedded NATS, in-memory limits, sandbox provider)
#   make dev     a local JetStream server and dispatcher to publish to (notifier dev)
#   make test    everything CI runs: formatting, vet, staticcheck, the race-enabled tests
#                against real servers (private redis-server processes, embedded NATS) and
#                headless Chromium (the /status page; `make chromium` installs it where missing),
#                then the dispatcher's tests that measure, without -race (make measure)

GO          ?= go
# A tag's name when HEAD has one (git describe); otherwise none, and the
# module version and revision the go command stamps (-buildvcs=true, which
# an environment's GOFLAGS=-buildvcs=false would turn off) stand in for it:
# `notifier version` prints both.
VERSION     ?= $(shell git describe --tags --dirty 2>/dev/null)
LDFLAGS     := $(if $(VERSION),-X github.com/notifier/notifier/cli.version=$(VERSION))
BUILDFLAGS  := -buildvcs=true -trimpath -ldflags "$(LDFLAGS)"
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
PKGS        := ./...

.PHONY: all build install demo dev test lint fmt-check vet staticcheck race measure chromium fuzz bench mutate clean

all: build

build:
	$(GO) build $(BUILDFLAGS) -o bin/notifier ./cmd/notifier

# Into $(go env GOBIN), else $(go env GOPATH)/bin: put that on PATH.
install:
	$(GO) install $(BUILDFLAGS) ./cmd/notifier
	@bin=$$($(GO) env GOBIN); bin=$${bin:-$$($(GO) env GOPATH)/bin}; \
	echo "installed $$bin/notifier: $$($$bin/notifier version | head -1)"; \
	case ":$$PATH:" in *":$$bin:"*) ;; *) echo "  $$bin is not on PATH: export PATH=\"$$bin:\$$PATH\"";; esac

demo:
	$(GO) run $(BUILDFLAGS) ./cmd/notifier demo

# A local JetStream server (state in ./.notifier-dev) and a dispatcher on
# in-memory limits and sandbox providers: publish to it and watch.
dev:
	$(GO) run $(BUILDFLAGS) ./cmd/notifier dev

test: chromium lint race measure

lint: fmt-check vet staticcheck

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# -trimpath here too: without it the results are cached under the
# checkout's path, and a fresh clone vets (75 s) and checks (67 s) the
# whole module again beside a burner; with it, a second clone takes 1–2 s.
vet:
	$(GO) vet -trimpath $(PKGS)

staticcheck:
	GOFLAGS="$$GOFLAGS -trimpath" $(GO) run $(STATICCHECK) $(PKGS)

# Two packages at a time (-p 2). dispatch, the longest, bounds its own
# tests' concurrency: at most two that measure pacing, a rate or a share at
# a fake provider, beside at most three that mostly wait (on a breaker, a
# pause, an ack_wait); see measures in dispatch/harness_test.go. The other
# packages run beside it, their parallel tests three at a time (four loaded
# two cores enough to stretch a breaker's outage past its test's patience).
# -trimpath: the compiled packages do not depend on the checkout's path, so
# a fresh clone reuses the machine's build cache. The whole of make test
# took 472 s in CI, 8 minutes here beside a CPU burner (docs/development.md).
race: chromium
	$(GO) test -race -trimpath -count=1 -p 2 -parallel 3 -timeout 30m $(PKGS)

# The dispatcher's tests that measure pacing, a rate, a share or a latency
# at a fake provider against a reference, or against the clock: without
# -race, whose detector took half of such a test's CPU and left its
# references at a third of the contract beside the rest of make test (race
# skips them; dispatch's testsToRun says which runs where). Three at a
# time (dispatch/harness_test.go's places); beside them cli's few that
# measure a cap or a contract through `notifier run` processes, whose CPU
# is the binaries' (cli/measure_test.go).
measure:
	NOTIFIER_TEST_MEASURES=only $(GO) test -trimpath -count=1 -timeout 20m ./dispatch/ ./cli/

# The /status page's tests drive Debian's chromium headless. Installed here
# where missing (as root, with apt-get); otherwise this fails with the command.
CHROMIUM := /usr/bin/chromium
chromium:
	@if [ -x $(CHROMIUM) ]; then \
		echo "chromium: $(CHROMIUM) is installed"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "chromium: $(CHROMIUM) is missing; installing Debian's chromium:"; \
		echo "  apt-get update && apt-get install -y chromium"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium \
			|| { echo "chromium: the install failed; run: apt-get install -y chromium"; exit 1; }; \
	else \
		echo "chromium: $(CHROMIUM) is missing and cannot be installed from here (needs root and apt-get)."; \
		echo "  Install it with: sudo apt-get install -y chromium"; \
		exit 1; \
	fi

# Each fuzz target for a while (the checked-in seeds already run in `make test`).
FUZZTIME ?= 60s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./queue/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./config/
	$(GO) test -run '^$$' -fuzz '^FuzzOneLine$$' -fuzztime $(FUZZTIME) ./internal/text/

# Deliberate bugs (scripts/mutations.txt), one at a time in a scratch copy:
# each must make a test fail. `make mutate MUTATIONS_RUN=never-record-sent`
# runs only the named ones. Exits non-zero when any survives.
MUTATIONS_RUN ?=
mutate:
	GO=$(GO) scripts/mutate.sh $(MUTATIONS_RUN)

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count=5 $(PKGS)

clean:
	rm -rf bin
