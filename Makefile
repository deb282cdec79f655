# sdr — two commands for a fresh machine:
#   make demo   the main job (for now: decode the bundled SDR capture)
#   make test   everything CI checks; installs what it needs
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME    ?= 5s
# package:target pairs
FUZZ_TARGETS = wire:FuzzDecode wire:FuzzDecodeCaptured wire:FuzzGopacketLayer wire:FuzzPcapReader \
               wire:FuzzImmLayout emunic:FuzzResponder
SAMPLE      ?= wire/testdata/rxe/sdr_verbs_basic.pcap

.PHONY: demo test deps lint unit fuzz bench

demo:
	$(GO) run ./cmd/sdr pcap -sdr 10/18/4 $(SAMPLE)

test: deps lint fuzz unit

# tshark cross-checks our encoder against Wireshark's dissector. As root it
# is installed from Debian; otherwise that test skips and says why.
deps:
	@command -v tshark >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing tshark"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tshark >/dev/null; \
	  else echo "warning: tshark is missing and we are not root: the tshark test will skip" >&2; fi; }
	$(GO) mod download

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

unit:
	$(GO) test -race -count=1 ./...

# A short run of every fuzz target on top of its committed corpus
# (testdata/fuzz); go test -fuzz accepts one target per run. Minimization
# is capped: its default minute per new input outlasts a short run, and go
# test then fails with "context deadline exceeded".
fuzz:
	@for pt in $(FUZZ_TARGETS); do \
	  pkg=$${pt%%:*}; t=$${pt#*:}; \
	  echo "fuzz $$pkg $$t for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./$$pkg || exit 1; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 6 ./wire
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 20000x -count 6 ./emunic
