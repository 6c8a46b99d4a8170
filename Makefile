# rkubelet: build, run on the bundled examples, test, lint, benchmark.
# Everything a target needs it installs or builds itself (offline images included).

CARGO      ?= cargo
RUN_DIR    ?= $(CURDIR)/.run
NODE_NAME  ?= $(shell cat /proc/sys/kernel/hostname | tr A-Z a-z)
PAUSE      ?= rkubelet/pause:3.10
BIN        := target/release/rkubelet

.PHONY: all build images run test lint bench chaos fuzz deps verify-unit clean

all: build

build:
	$(CARGO) build --release

# The offline busybox and pause images the examples and tests use (idempotent).
images:
	hack/build-images.sh

# Standalone kubelet on examples/manifests, state under .run/. Ctrl-C stops it and
# leaves the pods running; `make run` again adopts them.
run: build images
	mkdir -p $(RUN_DIR)
	$(BIN) --pod-manifest-path=$(CURDIR)/examples/manifests \
		--root-dir=$(RUN_DIR) \
		--hostname-override=$(NODE_NAME) \
		--pod-infra-container-image=$(PAUSE)

# Unit tests and integration tests against the real Docker engine. The integration
# tests mostly wait (for outages, back-offs, grace periods, rotations), so four run at
# once even on two cores; set RUST_TEST_THREADS to change it.
RUST_TEST_THREADS ?= 4
test: images
	RUST_TEST_THREADS=$(RUST_TEST_THREADS) $(CARGO) test

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings

# Start latency, RSS, threads and idle CPU against the raw Docker API; change-to-running
# per pod source (file, URL, etcd, API); the prober under 100 pods x 2 probes at 1 s
# (threads, lateness); the plain ports under connection floods (descriptors, threads,
# RSS, healthz latency); `kubectl exec … true` through the API server stand-in over
# WebSocket and SPDY next to `docker exec`. Programs, not tests.
bench: build images
	$(CARGO) bench

# The chaos suite at full size (benches/chaos.rs; the short forms are in `make test`):
# kill -9 under churn, a private dockerd restarted, API server + etcd away, root dir
# full, `ulimit -n 64`, the clock stepped. Needs root (tmpfs, a bridge, its own
# dockerd and containerd), etcd and libfaketime; ~20 min. `make chaos SCENARIOS="kill9
# disk"` runs some (kill9 dockerd sources disk fds clock).
SCENARIOS ?=
chaos: images
	command -v faketime >/dev/null || apt-get install -y faketime
	[ -x /usr/bin/etcd ] || apt-get install -y etcd-server
	RKUBELET_CHAOS=1 $(CARGO) bench --bench chaos -- $(SCENARIOS)

# Every fuzz target of fuzz/ for FUZZ_TIME seconds each (60: under 20 minutes in all),
# with libFuzzer's RSS and per-allocation bounds; prints runs, execs/s and crashes per
# target. Needs nightly and cargo-fuzz (installed when missing). FUZZ_MERGE=1 merges
# new coverage into the committed corpus. tests/fuzz_corpus.rs replays that corpus
# in `make test` on stable.
fuzz:
	hack/fuzz.sh

# Size of the dependency tree, and proof that no async runtime is in it.
deps:
	@$(CARGO) tree -e normal --prefix none | sort -u | wc -l | xargs echo "crates in the tree:"
	@! $(CARGO) tree -e normal --prefix none | grep -E '^(tokio|async-std|smol|async-executor|futures-executor|hyper) ' \
		|| (echo "an async runtime is in the dependency tree" && false)

# systemd-analyze accepts the unit (pointed at the built binary, since it checks ExecStart).
verify-unit: build
	sed 's#/usr/local/bin/rkubelet#$(CURDIR)/$(BIN)#' systemd/rkubelet.service > target/rkubelet.service
	systemd-analyze verify target/rkubelet.service

clean:
	$(CARGO) clean
	rm -rf $(RUN_DIR)
