# rkubelet: build, run on the bundled examples, test, lint, benchmark.
# Everything a target needs it installs or builds itself (offline images included).

CARGO      ?= cargo
RUN_DIR    ?= $(CURDIR)/.run
NODE_NAME  ?= $(shell cat /proc/sys/kernel/hostname | tr A-Z a-z)
PAUSE      ?= rkubelet/pause:3.10
BIN        := target/release/rkubelet

.PHONY: all build images run run-containerd test lint bench chaos fuzz deps verify-unit clean \
	build-arm64 build-armv7 build-static test-arm64 test-armv7 test-static size ci-smoke-arm64 \
	test-cgroup2

all: build

build:
	$(CARGO) build --release

# The offline busybox and pause images the examples and tests use (idempotent).
images:
	hack/build-images.sh

# Standalone kubelet on examples/manifests, state under .run/. Ctrl-C stops it and
# leaves the pods running; `make run` again adopts them. It runs the shipped config
# (systemd/config.yaml: no anonymous requests, no read-only port) with a standalone
# node's overrides, as the README's "Standalone nodes" describes: the ports on
# 127.0.0.1 only, client certificates of .run/pki's CA (hack/run-pki.sh makes it once,
# with the README's client certificate) authorized with AlwaysAllow, and the
# read-only port back on 127.0.0.1:10255 for the quick start's curls.
# tests/it/kubelet_port.rs runs the binary with the same config and overrides.
RUN_FLAGS = --config=$(CURDIR)/systemd/config.yaml \
	--pod-manifest-path=$(CURDIR)/examples/manifests \
	--root-dir=$(RUN_DIR) \
	--hostname-override=$(NODE_NAME) \
	--pod-infra-container-image=$(PAUSE) \
	--address=127.0.0.1 \
	--read-only-port=10255 \
	--client-ca-file=$(RUN_DIR)/pki/ca.crt \
	--authentication-token-webhook=false \
	--authorization-mode=AlwaysAllow

run: build images
	mkdir -p $(RUN_DIR)
	hack/run-pki.sh $(RUN_DIR)/pki
	$(BIN) $(RUN_FLAGS)

# `make run` on a containerd instead of Docker: hack/run-containerd.sh starts one of its
# own (CRI on, the offline images imported, a CNI bridge rkctr0 on 10.244.77.0/24) and
# leaves it and the pods running after Ctrl-C; the kubelet is the same command with
# --container-runtime-endpoint on its socket. State under .run/ (containerd's too).
run-containerd: build images
	mkdir -p $(RUN_DIR)
	hack/run-pki.sh $(RUN_DIR)/pki
	endpoint=$$(hack/run-containerd.sh $(RUN_DIR)) && \
	$(BIN) $(RUN_FLAGS) --container-runtime-endpoint=$$endpoint

# Unit tests and integration tests against the real Docker engine. The integration
# tests mostly wait (for outages, back-offs, grace periods, rotations), so four run at
# once even on two cores; set RUST_TEST_THREADS to change it.
RUST_TEST_THREADS ?= 4
test: images
	RUST_TEST_THREADS=$(RUST_TEST_THREADS) $(CARGO) test --workspace

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --all-features -- -D warnings

# Start latency, RSS, threads and idle CPU against the raw Docker API; change-to-running
# per pod source (file, URL, etcd, API); the prober under 100 pods x 2 probes at 1 s
# (threads, lateness); the plain ports under connection floods (descriptors, threads,
# RSS, healthz latency); `kubectl exec … true` through the API server stand-in over
# WebSocket and SPDY next to `docker exec`; pod start with --network-plugin=cni next to
# Docker's bridge (needs containernetworking-plugins). Programs, not tests.
bench: build images
	$(CARGO) bench

# The chaos suite at full size (benches/chaos.rs; the short forms are in `make test`):
# kill -9 under churn (on Docker and containerd), a private dockerd and a containerd
# of its own restarted, API server + etcd away, root dir full, `ulimit -n 64`, the
# clock stepped. Needs root (tmpfs, a bridge, its own dockerd and containerds), etcd
# and libfaketime; ~20 min. `make chaos SCENARIOS="kill9 disk"` runs some (kill9
# kill9-containerd dockerd containerd sources disk fds clock clock-behind).
SCENARIOS ?=
chaos: images
	command -v faketime >/dev/null || apt-get install -y faketime
	[ -x /usr/bin/etcd ] || apt-get install -y etcd-server
	RKUBELET_CHAOS=1 $(CARGO) bench --bench chaos -- $(SCENARIOS)

# Every fuzz target of fuzz/ for FUZZ_TIME seconds each (30: ~12 minutes in all, built),
# with libFuzzer's RSS and per-allocation bounds; prints runs, execs/s, coverage and crashes per
# target. Needs nightly and cargo-fuzz (installed when missing). FUZZ_MERGE=1 merges
# new coverage into the committed corpus. tests/fuzz_corpus.rs replays that corpus
# in `make test` on stable.
fuzz:
	hack/fuzz.sh

# Boards: static binaries (release profile) for arm64, armv7 and x86_64, each also
# stripped to target/boards/rkubelet-<name>, the file to install. hack/cross-tools.sh
# installs the rustup target and Debian's cross toolchain (or musl-tools) when missing;
# .cargo/config.toml names the linker and ring's C compiler per target. armv7 is glibc
# linked statically: rustup cannot fetch armv7-unknown-linux-musleabihf's std here
# (ARMV7_TARGET=armv7-unknown-linux-musleabihf where it can). Its code is Thumb-2 with
# NEON (thumbv7neon: 4.3 MiB against ARM mode's 5.7); ARMV7_TARGET=
# armv7-unknown-linux-gnueabihf for an ARMv7 board without NEON.
# Board builds name their source files relative to each crate's root, as Go's
# -trimpath in upstream's release builds: a shipped binary's panic locations carry no
# build machine's directories (and it is 15 KiB smaller). Cargo joins these flags
# with each target's own (.cargo/config.toml).
CARGO_HOME_DIR := $(or $(CARGO_HOME),$(HOME)/.cargo)
TRIM_PATHS := $(foreach d,$(wildcard $(CARGO_HOME_DIR)/registry/src/*),\"--remap-path-prefix=$(d)/=\",) \"--remap-path-prefix=$(CURDIR)/=\"
BOARD_CARGO = $(CARGO) --config "target.'cfg(all())'.rustflags=[$(TRIM_PATHS)]"

ARM64_TARGET  ?= aarch64-unknown-linux-musl
ARMV7_TARGET  ?= thumbv7neon-unknown-linux-gnueabihf
STATIC_TARGET ?= x86_64-unknown-linux-musl
BOARDS        := target/boards

build-arm64:
	hack/cross-tools.sh $(ARM64_TARGET)
	$(BOARD_CARGO) build --release --target $(ARM64_TARGET)
	@mkdir -p $(BOARDS)
	aarch64-linux-gnu-strip -o $(BOARDS)/rkubelet-arm64 target/$(ARM64_TARGET)/release/rkubelet

build-armv7:
	hack/cross-tools.sh $(ARMV7_TARGET)
	$(BOARD_CARGO) build --release --target $(ARMV7_TARGET)
	@mkdir -p $(BOARDS)
	arm-linux-gnueabihf-strip -o $(BOARDS)/rkubelet-armv7 target/$(ARMV7_TARGET)/release/rkubelet

build-static:
	hack/cross-tools.sh $(STATIC_TARGET)
	$(BOARD_CARGO) build --release --target $(STATIC_TARGET)
	@mkdir -p $(BOARDS)
	strip -o $(BOARDS)/rkubelet-x86_64 target/$(STATIC_TARGET)/release/rkubelet

# The unit tests of the cross-built test binary under qemu-user (hack/cross-test.sh
# lists the tests qemu cannot run, with why), then the smoke test of the stripped
# release binary (hack/smoke.sh: --version, a bad flag, healthz with no Docker, SIGTERM).
test-arm64: build-arm64
	hack/cross-tools.sh $(ARM64_TARGET) qemu
	hack/cross-test.sh $(ARM64_TARGET) qemu-aarch64
	hack/smoke.sh $(BOARDS)/rkubelet-arm64 qemu-aarch64

test-armv7: build-armv7
	hack/cross-tools.sh $(ARMV7_TARGET) qemu
	hack/cross-test.sh $(ARMV7_TARGET) qemu-arm
	hack/smoke.sh $(BOARDS)/rkubelet-armv7 qemu-arm

test-static: build-static
	hack/smoke.sh $(BOARDS)/rkubelet-x86_64

# Size of the three stripped board binaries (builds them first).
size: build-arm64 build-armv7 build-static
	@printf '%-8s %-32s %10s\n' target triple MiB
	@for b in arm64:$(ARM64_TARGET) armv7:$(ARMV7_TARGET) x86_64:$(STATIC_TARGET); do \
		n=$${b%%:*}; t=$${b#*:}; \
		printf '%-8s %-32s %10s\n' $$n $$t $$(stat -c %s $(BOARDS)/rkubelet-$$n | awk '{ printf "%.2f", $$1 / 1048576 }'); \
	done

# CI's arm64 smoke test: the dev profile (no LTO, no optimisation: a clean cross build
# in a few minutes instead of a fat-LTO release build's 10+), since the smoke test
# checks the target's start-up, flags, ports and signals, not its speed or size.
# No debug info either: it is most of a dev build's link time and unused here.
# It builds where CARGO_TARGET_DIR says (CI gives it a directory of its own, so that it
# can build while `make test` runs).
ci-smoke-arm64:
	hack/cross-tools.sh $(ARM64_TARGET) qemu
	CARGO_PROFILE_DEV_DEBUG=0 $(CARGO) build --target $(ARM64_TARGET)
	hack/smoke.sh $(or $(CARGO_TARGET_DIR),target)/$(ARM64_TARGET)/debug/rkubelet qemu-aarch64

# The container manager, the cgroupfs readers and the eviction signals on a real cgroup
# v2 hierarchy with the systemd driver (what current Raspberry Pi OS and Debian boot),
# which this project's cgroup v1 machines cannot give a test, in a qemu guest
# (hack/cgroup2-guest.sh) booted twice: with every controller, and with
# cgroup_disable=memory. Each boot runs the library's unit-test binary on the guest's
# tests (src/kubelet/cgroup2_guest.rs) and the cgroup modules' own; the second also
# hack/smoke.sh on the debug binary (its one start-up line about the missing memory
# controller, and /healthz?verbose's warning). Both binaries are what `cargo test
# --workspace --no-run` builds (after `make test`: nothing to build). Needs
# qemu-system-x86, linux-image-amd64 and busybox (apt); about a minute under TCG.
CGROUP2_TESTS ?= kubelet::cgroup2_guest:: cm:: stats::cgroupfs:: eviction::signals::
CGROUP2_BIN = $(or $(CARGO_TARGET_DIR),target)/debug/rkubelet
# (CGROUP2_EXE: the library's unit-test binary already built, so that no cargo runs:
# CI's, beside `make test`.)
CGROUP2_EXE ?=
test-cgroup2:
	@exe="$(CGROUP2_EXE)"; [ -n "$$exe" ] || exe=$$($(CARGO) test --workspace --no-run 2>&1 \
		| tee /dev/stderr \
		| sed -n 's/.*Executable unittests src\/lib.rs (\(.*\/rkubelet-[0-9a-f]*\))$$/\1/p'); \
	[ -n "$$exe" ] || { echo "test-cgroup2: no unit-test binary built" >&2; exit 1; }; \
	hack/cgroup2-guest.sh -e RKUBELET_CGROUP2_GUEST=memory -- \
		$$exe $(CGROUP2_TESTS) --test-threads=1 && \
	hack/cgroup2-guest.sh -k cgroup_disable=memory \
		-e RKUBELET_CGROUP2_GUEST=nomemory -e SMOKE_MEMORY_CGROUP=missing -- \
		/bin/sh -c "$$exe $(CGROUP2_TESTS) --test-threads=1 && hack/smoke.sh $(CGROUP2_BIN)"

# Size of the dependency tree, and proof that no async runtime is in it.
deps:
	@$(CARGO) tree --workspace -e normal --prefix none | sort -u | wc -l | xargs echo "crates in the tree:"
	@! $(CARGO) tree --workspace -e normal --prefix none | grep -E '^(tokio|async-std|smol|async-executor|futures-executor|hyper) ' \
		|| (echo "an async runtime is in the dependency tree" && false)

# systemd-analyze accepts the unit (pointed at the built binary, since it checks ExecStart).
# The unit checked against a binary it can name: the release build, built if missing
# (CI names the debug one `make test` built: no second build of its own).
UNIT_BIN ?= $(BIN)
verify-unit:
	@[ -x $(UNIT_BIN) ] || $(MAKE) build
	sed 's#/usr/local/bin/rkubelet#$(CURDIR)/$(UNIT_BIN)#' systemd/rkubelet.service > target/rkubelet.service
	systemd-analyze verify target/rkubelet.service

clean:
	$(CARGO) clean
	rm -rf $(RUN_DIR)
