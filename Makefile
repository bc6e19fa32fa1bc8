# Mooncake-Go build and test entry points. `make test` is what CI runs.
GO ?= go
BIN := bin/mooncake
TEST_TIMEOUT ?= 20m

.PHONY: all build replay test test-vllm test-rdma vet build-nocgo bench bench-transfer bench-store clean

all: build

# libmooncake.so and its ABI tests (Go purego, C, Python ctypes).
include abi.mk

build:
	$(GO) build -o $(BIN) ./core/cmd/mooncake

# Main job: replay the embedded Mooncake conversation trace on an in-process
# pool (master + 2 nodes over tcp on 127.0.0.1) and print the report.
replay: build
	./$(BIN) replay

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }

# core must build without cgo.
build-nocgo:
	CGO_ENABLED=0 $(GO) build ./core/...

# The rdma transport (cgo over libibverbs, tag rdma) must build and pass its
# no-device tests; needs Debian's libibverbs-dev.
test-rdma:
	$(GO) vet -tags rdma ./core/transfer/rdma/
	$(GO) test -tags rdma -count=1 ./core/transfer/rdma/

# vLLM connector (mooncake_go.vllm through libmooncake.so): the call-order
# harness (vllm_sim) with content checks and the two-process P/D test. The
# Go side (package vllm, vllm/pd, vllm/proxy) runs in the -race run below.
test-vllm: lib venv
	$(GO) build -o bin/mooncake ./core/cmd/mooncake
	MOONCAKE_GO_LIB=$(CURDIR)/$(LIBMOONCAKE) MC_MOONCAKE_BIN=$(CURDIR)/bin/mooncake \
		$(VENV)/bin/python -m pytest -q vllm/python/tests

test: vet build-nocgo test-rdma test-abi test-vllm
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./core/...

clean:
	rm -rf bin build

# Transfer engine vs iperf3 (loopback, single stream) and memcpy, same run.
bench-transfer: build
	./scripts/bench-transfer.sh

# Pool put/get vs redis-server SET/GET (redis-benchmark), same value sizes
# and concurrency, same run; installs Debian's redis-server when missing.
bench-store: build
	./scripts/bench-store.sh

# vLLM connector (store mode, 32-layer FlashAttention blocks, 64 parts per
# block) vs the store client's raw put/get of the same bytes, tcp and shm,
# as a table (issue 6's bar: ratio >= 0.5); the benchmark itself is
# BenchmarkConnectorVsRaw.
.PHONY: bench-vllm
bench-vllm:
	MC_BENCH=1 $(GO) test -count=1 -run '^TestConnectorVsRawRatio$$' -v ./vllm/
