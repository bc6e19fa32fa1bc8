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

.PHONY: lib venv test-abi nixl-plugin trtllm-wrapper

# Always handed to go build, which relinks only when a dependency changed.
lib:
	@mkdir -p build
	$(GO) build -buildmode=c-shared -ldflags "$(LIBMOONCAKE_LDFLAGS)" -o $(LIBMOONCAKE) ./abi/cmd/libmooncake

# nixl-plugin: NIXL's backend plugin build/libplugin_MOONCAKE_GO.so, a C++
# shim (nixl/plugin) over the mc_nixl_* functions of libmooncake.so, which
# it finds beside itself (RUNPATH $ORIGIN). C++20 and libstdc++'s C++11
# string ABI like NIXL's wheels; libstdc++ linked dynamically (NIXL and the
# shim share one); only nixl_plugin_init/fini exported.
NIXL_PLUGIN := build/libplugin_MOONCAKE_GO.so
CXX ?= g++
nixl-plugin: lib
	$(CXX) -std=c++20 -O2 -fPIC -shared -Wall -Wno-invalid-offsetof -fvisibility=hidden -fvisibility-inlines-hidden \
		-D_GLIBCXX_USE_CXX11_ABI=1 -Iabi/include -Inixl/plugin nixl/plugin/plugin.cpp -Lbuild -lmooncake \
		-Wl,-rpath,'$$ORIGIN' -Wl,-z,nodelete -Wl,-Bsymbolic -Wl,--no-undefined \
		-Wl,--version-script=$(CURDIR)/nixl/plugin/plugin.map -o $(NIXL_PLUGIN)

# trtllm-wrapper: TensorRT-LLM's Mooncake transfer-agent library
# libtensorrt_llm_mooncake_wrapper.so (trtllm/shim over mc_trtllm_*), one
# per interface generation it covers (build/trtllm/g2b, build/trtllm/g3;
# RUNPATH $ORIGIN/../.. finds libmooncake.so two folders up, in build/ and
# in the wheel's mooncake_go/), and the two-process harness of each.
TRTLLM_GENS := g2b:2 g3:3
trtllm-wrapper: lib
	@for g in $(TRTLLM_GENS); do d=build/trtllm/$${g%%:*}; n=$${g##*:}; mkdir -p $$d && \
	echo "$(CXX) ... -DMCGO_TRTLLM_GEN=$$n -o $$d/libtensorrt_llm_mooncake_wrapper.so" && \
	$(CXX) -std=c++20 -O2 -fPIC -shared -Wall -Wno-pragmas -DMCGO_TRTLLM_GEN=$$n -fvisibility=hidden -fvisibility-inlines-hidden \
		-D_GLIBCXX_USE_CXX11_ABI=1 -Iabi/include -Itrtllm/shim trtllm/shim/agent.cpp -Lbuild -lmooncake \
		-Wl,-rpath,'$$ORIGIN/../..' -Wl,-z,nodelete -Wl,--no-undefined \
		-Wl,--version-script=$(CURDIR)/trtllm/shim/agent.map -o $$d/libtensorrt_llm_mooncake_wrapper.so && \
	$(CXX) -std=c++20 -O2 -Wall -Wno-pragmas -DMCGO_TRTLLM_GEN=$$n -D_GLIBCXX_USE_CXX11_ABI=1 -Iabi/include -Itrtllm/shim \
		trtllm/shim/harness.cpp -ldl -o $$d/trtllm-harness || exit 1; done

venv: $(VENV)/.requirements-dev.stamp

$(VENV)/.requirements-dev.stamp: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $@

test-abi: lib venv
	$(GO) build -o bin/mooncake ./core/cmd/mooncake
	$(GO) build -o bin/embedded-etcd ./integration-tests/cmd/embedded-etcd
	MC_LIBMOONCAKE=$(CURDIR)/$(LIBMOONCAKE) $(GO) test -count=1 ./abi/abitest
	MC_LIBMOONCAKE=$(CURDIR)/$(LIBMOONCAKE) MOONCAKE_GO_LIB=$(CURDIR)/$(LIBMOONCAKE) \
		MC_MOONCAKE_BIN=$(CURDIR)/bin/mooncake \
		$(VENV)/bin/python -m pytest -q -rs abi/python/tests

# Restore the includer's default goal (none yet: the includer's next target
# becomes it); used alone, this file's default is lib.
.DEFAULT_GOAL := $(or $(abi_saved_default_goal),$(if $(filter-out abi.mk,$(notdir $(MAKEFILE_LIST))),,lib))

# wheel: the mooncake-go Python distribution (mooncake_go + mooncake_go.vllm
# + mooncake_go.sglang + mooncake_go.lmcache
# with libmooncake.so and the `mooncake` binary inside, and the
# upstream-compatible `mooncake` package with its console scripts) in
# build/wheel/, then a smoke check: installed into a throwaway venv, the
# connector modules and mooncake.engine import (mooncake_go.lmcache's
# classes need LMCache: its engine tests import them from the wheel), the bundled library loads,
# the upstream tool names run the bundled binary, and the guard .pth is in
# site-packages.
.PHONY: wheel
wheel: lib venv nixl-plugin trtllm-wrapper
	cp $(LIBMOONCAKE) abi/python/mooncake_go/libmooncake.so
	cp $(NIXL_PLUGIN) abi/python/mooncake_go/libplugin_MOONCAKE_GO.so
	for g in g2b g3; do mkdir -p abi/python/mooncake_go/trtllm/$$g && cp build/trtllm/$$g/libtensorrt_llm_mooncake_wrapper.so abi/python/mooncake_go/trtllm/$$g/; done
	$(GO) build -buildvcs=auto -o abi/python/mooncake_go/bin/mooncake ./core/cmd/mooncake
	rm -rf build/wheel build/wheel-venv build/lib build/bdist.* && $(VENV)/bin/pip wheel --quiet --disable-pip-version-check --no-deps -w build/wheel .
	rm -rf abi/python/mooncake_go/libmooncake.so abi/python/mooncake_go/libplugin_MOONCAKE_GO.so abi/python/mooncake_go/trtllm abi/python/mooncake_go/bin build/lib build/bdist.*
	rm -rf mooncake_go.egg-info compat/python/mooncake_go.egg-info
	$(PYTHON) -m venv build/wheel-venv && build/wheel-venv/bin/pip install --quiet --disable-pip-version-check build/wheel/*.whl
	cd build && env -u MOONCAKE_GO_LIB -u MC_MOONCAKE_BIN wheel-venv/bin/python -c "import mooncake_go, mooncake_go.vllm, mooncake_go.sglang, mooncake_go.lmcache, mooncake_go.p2p, mooncake.engine; from mooncake_go.vllm import MooncakeGoConnector; from mooncake_go.sglang import _abi; print('wheel ok:', mooncake_go.load()._name, 'sglang abi', hex(_abi._lib_handle().mc_sglang_abi_version()), mooncake_go.lmcache.__all__)"
	cd build && env -u MC_MOONCAKE_BIN wheel-venv/bin/mooncake_master --version && env -u MC_MOONCAKE_BIN wheel-venv/bin/mooncake_http_metadata_server --help >/dev/null
	test -f build/wheel-venv/lib/python*/site-packages/mooncake_go_guard.pth
