# sdr — two commands for a fresh machine:
#   make demo   the main job: RC, raw SDR and SDR reliability on one lossy long link
#   make test   everything CI checks; installs what it needs
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME    ?= 30000x
# package:target pairs
FUZZ_TARGETS = wire:FuzzDecode wire:FuzzDecodeCaptured wire:FuzzGopacketLayer wire:FuzzPcapReader \
               wire:FuzzImmLayout emunic:FuzzResponder emunic/sdrnic:FuzzPeerInfo emunic/sdrnic:FuzzSDKSequence:3000x sdr/engine:FuzzProcess \
               reliability/control:FuzzDecode reliability:FuzzHostileControl:10000x reliability/ec:FuzzReconstruct \
               reliability/ec:FuzzParseParams reliability/model:FuzzPredict reliability/model:FuzzParseScheme
SAMPLE      ?= wire/testdata/rxe/sdr_verbs_basic.pcap
BIN         ?= $(or $(TMPDIR),/tmp)/sdr-demo

.PHONY: demo test deps lint generate-check unit fuzz bench interop

# Debian packages the suite needs: tshark cross-checks the encoder; clang
# and libbpf-dev regenerate the XDP program; tcpdump, ping and ip drive the
# namespace tests.
APT_PACKAGES = tshark clang-14 llvm-14 libbpf-dev tcpdump iputils-ping iproute2

# The main job: what the project can show so far, with no setup and no
# root. Real SDR traffic from Soft-RoCE decoded; then the point of the
# project: the same 4 MiB messages over a 20 ms, 1 %-lossy link between two
# emulated NICs with the NIC's RC go-back-N, raw SDR (UC, no reliability)
# and each software reliability scheme, side by side with the models'
# predictions.
demo:
	$(GO) build -o $(BIN) ./cmd/sdr
	$(BIN) pcap -q -sdr 10/18/4 $(SAMPLE)
	$(BIN) compare

test: deps lint generate-check fuzz unit

# As root the packages are installed from Debian; otherwise the tests that
# need them skip and say why.
deps:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing $$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "warning: missing $$missing and not root: tests that need them will skip" >&2; fi; \
	fi
	$(GO) mod download

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

# The committed bpf2go output must be what the committed C source compiles to.
generate-check:
	$(GO) generate ./ebpf
	@git diff --exit-code --stat -- ebpf/steer_bpfel.go ebpf/steer_bpfel.o || { echo "ebpf: committed bpf2go output is stale: run go generate ./ebpf"; exit 1; }

unit:
	$(GO) test -race -count=1 ./...

# A short run of every fuzz target on top of its committed corpus
# (testdata/fuzz); go test -fuzz accepts one target per run. The budget is
# a count of executions, not a duration: with a duration, a new input found
# near the end is still being minimized when time runs out, and go test
# then fails the run with "context deadline exceeded". Minimization gets a
# count budget for the same reason.
#
# A target may name its own count as a third field (pkg:Target:count), for
# fuzzers whose every execution runs a whole device pair.
fuzz:
	@for pt in $(FUZZ_TARGETS); do \
	  pkg=$${pt%%:*}; rest=$${pt#*:}; t=$${rest%%:*}; n=$(FUZZTIME); \
	  case $$rest in *:*) n=$${rest#*:};; esac; \
	  echo "fuzz $$pkg $$t for $$n"; \
	  $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $$n -fuzzminimizetime 100x ./$$pkg || exit 1; \
	done

# emunic against Linux Soft-RoCE in a Debian guest under qemu (root; the
# guest is built once from Debian's archive into INTEROP_CACHE, ~3 min).
INTEROP_CACHE ?= /var/cache/sdr-interop
interop: deps
	bash testbed/interop/build-guest.sh $(INTEROP_CACHE)
	SDR_INTEROP=1 SDR_INTEROP_CACHE=$(INTEROP_CACHE) $(GO) test -count=1 -v -timeout 30m ./testbed/interop

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 6 ./wire
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 20000x -count 6 ./emunic
