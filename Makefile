# sdr — two commands for a fresh machine:
#   make demo   the main job: RC vs SDR reliability over an emulated long-haul link
#   make test   everything CI checks; installs what it needs
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME    ?= 30000x
# package:target pairs
# Every Fuzz function in the tree is fuzzed (found, not listed: a new
# fuzzer cannot be forgotten); FUZZ_COUNTS gives the fuzzers whose every
# execution runs a whole device pair a smaller count (pkg:Target:count).
FUZZ_COUNTS  = emunic:FuzzResponderSequence:10000x emunic/sdrnic:FuzzSDKSequence:3000x \
               reliability:FuzzHostileControl:10000x hwnic/dpa/dpasim:FuzzHandler:3000x
FUZZ_TARGETS = $(shell grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+' . | \
                 sed -E 's|^\./||; s|/[^/]*_test\.go:func |:|' | sort | \
                 awk -v counts='$(FUZZ_COUNTS)' 'BEGIN { n = split(counts, c, " "); for (i = 1; i <= n; i++) { k = c[i]; sub(/:[^:]*$$/, "", k); o[k] = c[i] } } { print (($$0 in o) ? o[$$0] : $$0) }')
SAMPLE      ?= wire/testdata/rxe/sdr_verbs_basic.pcap
BIN         ?= $(or $(TMPDIR),/tmp)/sdr-demo
REPORT      ?= testbed-report

.PHONY: help build demo test deps lint generate-check unit fuzz bench interop docs dpa dpa-bringup dpa-isa libsdr

# help lists the targets: the line after '##' on each target's line.
help: ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:[^#]*## /\t/' | expand -t 16

build: ## the sdr command, as $(BIN)
	$(GO) build -o $(BIN) ./cmd/sdr

# The SDK's C interface: libsdr.so and libsdr.a with sdr.h, sdr_mr.h and
# sdr.pc, and the C examples built against them (sdr_write_bw, sdr_sr).
# LIBSDR_FLAGS go to go build (-tags dpa,doca on a BlueField host).
PREFIX ?= $(CURDIR)/build/libsdr
libsdr: ## the SDK's C API (sdr.h) as libsdr.so/.a with sdr.pc, installed in $(PREFIX)
	sh scripts/install-libsdr.sh $(PREFIX) $(LIBSDR_FLAGS)

# Debian packages the suite needs: tshark cross-checks the encoder; clang
# and libbpf-dev regenerate the XDP program; tcpdump, ping and ip drive the
# namespace tests; libibverbs-dev gives hwnic/dpa the mlx5 layouts (mlx5dv.h);
# gcc, g++ and pkg-config build libsdr's C programs as a user would; Slurm
# and munge run the collectives' launcher test on a one-node cluster;
# podman with runc builds and runs the container image (testbed/container).
APT_PACKAGES = tshark clang-14 llvm-14 libbpf-dev tcpdump iputils-ping iproute2 libibverbs-dev util-linux linux-headers-amd64 \
               gcc g++ pkg-config slurmctld slurmd slurm-client munge podman runc

# The main job: what the project can show so far, with no setup. Real SDR
# traffic from Soft-RoCE decoded; then the point of the project: two hosts
# (network namespaces) joined by an emulated long-haul link (20 ms RTT, 1 %
# loss each way) that carries emunic's real RoCEv2 frames, the same messages
# moved with the NIC's RC go-back-N and with SDR's software reliability,
# beside reliability/model's predictions; a report directory with plots.
# Without root the link runs in-process with the same model (and says so).
demo: ## the main job: Soft-RoCE capture decoded, then RC vs SDR over an emulated long-haul link
	$(GO) build -o $(BIN) ./cmd/sdr
	$(BIN) pcap -q -sdr 10/18/4 $(SAMPLE)
	$(BIN) testbed -o $(REPORT)

test: deps lint generate-check fuzz unit ## everything CI checks (installs what it needs as root)

# As root the packages are installed from Debian; otherwise the tests that
# need them skip and say why.
deps: ## the suite's Debian packages (as root) and Go modules
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing $$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "warning: missing $$missing and not root: tests that need them will skip" >&2; fi; \
	fi
	$(GO) mod download

lint: ## gofmt, go vet (also -tags dpa), staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags dpa ./hwnic/...
	$(GO) run $(STATICCHECK) ./...

# The committed bpf2go output must be what the committed C source compiles to.
generate-check: ## the committed XDP object is what its C source compiles to
	$(GO) generate ./ebpf
	@git diff --exit-code --stat -- ebpf/steer_bpfel.go ebpf/steer_bpfel.o || { echo "ebpf: committed bpf2go output is stale: run go generate ./ebpf"; exit 1; }

unit: ## go test -race over every package
	@echo "$(GO) test -race -count=1 ./..."; start=$$(date +%s); \
	$(GO) test -race -count=1 ./...; rc=$$?; echo "unit: $$(($$(date +%s) - start)) s"; exit $$rc

# A short run of every fuzz target on top of its committed corpus
# (testdata/fuzz); go test -fuzz accepts one target per run. The budget is
# a count of executions, not a duration: with a duration, a new input found
# near the end is still being minimized when time runs out, and go test
# then fails the run with "context deadline exceeded". Minimization gets a
# count budget for the same reason.
#
# A target may name its own count as a third field (pkg:Target:count), for
# fuzzers whose every execution runs a whole device pair.
fuzz: ## a short run of every fuzz target over its corpus
	@start=$$(date +%s); for pt in $(FUZZ_TARGETS); do \
	  pkg=$${pt%%:*}; rest=$${pt#*:}; t=$${rest%%:*}; n=$(FUZZTIME); \
	  case $$rest in *:*) n=$${rest#*:};; esac; \
	  echo "fuzz $$pkg $$t for $$n"; \
	  $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $$n -fuzzminimizetime 100x ./$$pkg || exit 1; \
	done; echo "fuzz: $$(($$(date +%s) - start)) s"

# emunic against Linux Soft-RoCE in a Debian guest under qemu (root; the
# guest is built once from Debian's archive into INTEROP_CACHE, ~3 min).
INTEROP_CACHE ?= /var/cache/sdr-interop
interop: deps ## against Linux Soft-RoCE in a Debian guest (builds it on first use)
	bash testbed/interop/build-guest.sh $(INTEROP_CACHE)
	SDR_INTEROP=1 SDR_INTEROP_CACHE=$(INTEROP_CACHE) $(GO) test -count=1 -v -timeout 30m ./testbed/interop

# Every package with benchmarks (found, not listed), -count $(BENCHCOUNT)
# each for benchstat; BENCH_TIMES gives packages whose benchmarks move whole
# transfers or device pairs a -benchtime of their own (pkg:benchtime).
# BENCH=regexp narrows it (e.g. make bench BENCH=PipeTransfer).
BENCH       ?= .
BENCHCOUNT  ?= 6
BENCH_TIMES  = emunic:20000x reliability/driver:5x testbed/linkemu:3x emunic/xsk:3x testbed/sim:20x
BENCH_PKGS   = $(shell grep -rl --include='*_test.go' '^func Benchmark' . | xargs -n1 dirname | sed 's|^\./||' | sort -u)
bench: ## every package's benchmarks (-benchmem, BENCHCOUNT runs each, for benchstat)
	@for pkg in $(BENCH_PKGS); do \
	  t=1s; for bt in $(BENCH_TIMES); do [ "$${bt%%:*}" = "$$pkg" ] && t=$${bt#*:}; done; \
	  echo "bench $$pkg (-benchtime $$t)"; \
	  SDR_DPASIM_WINDOWS=direct $(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -benchtime $$t -count $(BENCHCOUNT) ./$$pkg || exit 1; \
	done

# docs/reproduction.md and its plots (docs/sim), generated by sdr sim: the
# paper's comparison at 400 Gbit/s and 25 ms through the reliability
# engines in the simulator. Sizes above 512 MiB take 300 samples (an 8 GiB
# sample costs 20–270 ms of CPU; at 1000 the grid alone takes 13 minutes on
# two cores, this about 8 with the distance sweep); the report says so.
# Built with go build so that the report can name the revision it measured.
DOCS_SIM_FLAGS ?= -samples 1000 -large-samples 300
docs: ## docs/reproduction.md and plots from sdr sim, the paper-direction testbed report, Fig. 13 (allreduce)
	$(GO) build -buildvcs=true -o $(BIN) ./cmd/sdr
	$(BIN) sim $(DOCS_SIM_FLAGS) -out docs/sim -report docs/reproduction.md >/dev/null
	$(BIN) testbed -q -scenario docs/testbed/paper-direction.json -o docs/testbed/paper-direction >/dev/null
	$(BIN) allreduce -sim -out docs/allreduce >/dev/null

# The DPA handler for the DPA's ISA with Debian's clang (RV64IMAC, -Werror,
# -c only) against the shim's FlexIO headers: builds at the declared
# FlexIO generation, fails at the one before, no LR/SC in the object.
# `make unit` runs the same test; this runs it alone.
dpa-isa: ## the DPA handler compiled for RISC-V: version gates and no compare-and-swap
	$(GO) test -count=1 -run 'TestDeviceISA' -v ./hwnic/dpa/devicetest

# BlueField-3 hosts only (DOCA installed): the DPA RX handler and the
# bring-up probe (hwnic/dpa/device/handler.c, probe.c) built by dpacc
# into libsdr_dpa.a, the DPA image plus its host stubs, which the host
# side links; then that side's tests, with the tags dpa and doca: FlexIO's include and library paths
# from pkg-config's libflexio (hwnic/dpa/doca_dpa.go), never the CI's
# flexio_decl.h. DOCA's libflexio.pc is not on pkg-config's default path:
# FLEXIO_PC_DIR is added to PKG_CONFIG_PATH. See hwnic/dpa/README.md.
DOCA  ?= /opt/mellanox/doca
DPACC ?= $(DOCA)/tools/dpacc
FLEXIO_PC_DIR ?= /opt/mellanox/flexio/lib/pkgconfig
DPA_BUILD = hwnic/dpa/device/build
dpa dpa-bringup: export PKG_CONFIG_PATH := $(FLEXIO_PC_DIR)$(if $(PKG_CONFIG_PATH),:$(PKG_CONFIG_PATH))
dpa: ## BlueField-3 hosts (DOCA): build the DPA handler with dpacc, then the tests with -tags dpa,doca
	@pkg-config --exists libflexio || { echo "make dpa: pkg-config finds no libflexio (DOCA's FlexIO SDK) in $$PKG_CONFIG_PATH or its default path: install DOCA with the FlexIO SDK (libflexio-dev), or set FLEXIO_PC_DIR to the directory of its libflexio.pc" >&2; exit 1; }
	@echo "libflexio $$(pkg-config --modversion libflexio): $$(pkg-config --cflags --libs libflexio)"
	mkdir -p $(DPA_BUILD)
	$(DPACC) hwnic/dpa/device/handler.c hwnic/dpa/device/probe.c -o $(DPA_BUILD)/libsdr_dpa.a -mcpu=nv-dpa-bf3 -hostcc=gcc \
	  --app-name=sdr_dpa_app -devicecc-options="-O2 -Wall -I$(DOCA)/include" \
	  -hostcc-options="-DFLEXIO_ALLOW_EXPERIMENTAL_API $$(pkg-config --cflags libflexio)" \
	  -device-libs="-L$(DOCA)/lib/x86_64-linux-gnu -lflexio_dev"
	CGO_ENABLED=1 $(GO) vet -tags dpa,doca ./hwnic/...
	CGO_ENABLED=1 $(GO) test -tags dpa,doca -count=1 ./hwnic/dpa/...

# BlueField-3 hosts only: the bring-up kit. make dpa, then sdr built with
# the tags, then the doctor's walk on DEV (PEER: a second port; default
# DEV looped back), writing the report to send back
# (hwnic/dpa/README.md, "The bring-up kit").
DEV  ?= mlx5_0
PEER ?= $(DEV)
BRINGUP_REPORT ?= dpa-bringup-$(shell hostname).json
dpa-bringup: dpa ## BlueField-3 hosts (DOCA, root): make dpa, then sdr dpa doctor on DEV, writing the report to send back
	CGO_ENABLED=1 $(GO) build -tags dpa,doca -o $(BIN)-dpa ./cmd/sdr
	$(BIN)-dpa dpa doctor -dev $(DEV) -peer $(PEER) -report $(BRINGUP_REPORT)
	@echo "send back $(BRINGUP_REPORT) (and, if a step failed, dmesg and the FlexIO trace)"
