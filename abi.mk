# abi.mk - libmooncake.so (the C ABIs under abi/) and its tests.
# Included by the Makefile; also usable alone: make -f abi.mk test-abi
#
#   lib       build/libmooncake.so (c-shared; only mc_* exported, soname libmooncake.so)
#   venv      .venv with requirements-dev.txt (redone only when that file changes)
#   test-abi  lib + venv, then the Go purego/C tests of the transfer-engine and
#             store ABIs and of the headers (abi/abitest; without -race, which
#             would add nothing: the library itself is never race-built, though
#             `go test -race ./abi/...` passes too) and the Python tests
#             (abi/python/tests: ctypes, and the mooncake_go loader and Store,
#             against a `mooncake master` and a `mooncake node` from bin/mooncake)

# Whatever includes this file keeps its own default goal.
abi_saved_default_goal := $(.DEFAULT_GOAL)

GO ?= go
PYTHON ?= python3
VENV ?= .venv
LIBMOONCAKE := build/libmooncake.so
# The external linker runs in a temporary directory: the script path must be absolute.
LIBMOONCAKE_LDFLAGS := -extldflags -Wl,-soname,libmooncake.so,--version-script=$(CURDIR)/abi/libmooncake.map

.PHONY: lib venv test-abi

# Always handed to go build, which relinks only when a dependency changed.
lib:
	@mkdir -p build
	$(GO) build -buildmode=c-shared -ldflags "$(LIBMOONCAKE_LDFLAGS)" -o $(LIBMOONCAKE) ./abi/cmd/libmooncake

venv: $(VENV)/.requirements-dev.stamp

$(VENV)/.requirements-dev.stamp: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $@

test-abi: lib venv
	$(GO) build -o bin/mooncake ./core/cmd/mooncake
	MC_LIBMOONCAKE=$(CURDIR)/$(LIBMOONCAKE) $(GO) test -count=1 ./abi/abitest
	MC_LIBMOONCAKE=$(CURDIR)/$(LIBMOONCAKE) MOONCAKE_GO_LIB=$(CURDIR)/$(LIBMOONCAKE) \
		MC_MOONCAKE_BIN=$(CURDIR)/bin/mooncake \
		$(VENV)/bin/python -m pytest -q abi/python/tests

# Restore the includer's default goal (none yet: the includer's next target
# becomes it); used alone, this file's default is lib.
.DEFAULT_GOAL := $(or $(abi_saved_default_goal),$(if $(filter-out abi.mk,$(notdir $(MAKEFILE_LIST))),,lib))

# wheel: the mooncake-go Python distribution (mooncake_go + mooncake_go.vllm
# + mooncake_go.lmcache with libmooncake.so and the `mooncake` binary inside, and the
# upstream-compatible `mooncake` package with its console scripts) in
# build/wheel/, then a smoke check: installed into a throwaway venv, the
# connector modules and mooncake.engine import (mooncake_go.lmcache's
# classes need LMCache: its engine tests import them from the wheel), the bundled library loads,
# the upstream tool names run the bundled binary, and the guard .pth is in
# site-packages.
.PHONY: wheel
wheel: lib venv
	cp $(LIBMOONCAKE) abi/python/mooncake_go/libmooncake.so
	$(GO) build -buildvcs=auto -o abi/python/mooncake_go/bin/mooncake ./core/cmd/mooncake
	rm -rf build/wheel build/wheel-venv build/lib build/bdist.* && $(VENV)/bin/pip wheel --quiet --disable-pip-version-check --no-deps -w build/wheel .
	rm -rf abi/python/mooncake_go/libmooncake.so abi/python/mooncake_go/bin build/lib build/bdist.*
	rm -rf mooncake_go.egg-info compat/python/mooncake_go.egg-info
	$(PYTHON) -m venv build/wheel-venv && build/wheel-venv/bin/pip install --quiet --disable-pip-version-check build/wheel/*.whl
	cd build && env -u MOONCAKE_GO_LIB -u MC_MOONCAKE_BIN wheel-venv/bin/python -c "import mooncake_go, mooncake_go.vllm, mooncake_go.lmcache, mooncake.engine; from mooncake_go.vllm import MooncakeGoConnector; print('wheel ok:', mooncake_go.load()._name, mooncake_go.lmcache.__all__)"
	cd build && env -u MC_MOONCAKE_BIN wheel-venv/bin/mooncake_master --version && env -u MC_MOONCAKE_BIN wheel-venv/bin/mooncake_http_metadata_server --help >/dev/null
	test -f build/wheel-venv/lib/python*/site-packages/mooncake_go_guard.pth
