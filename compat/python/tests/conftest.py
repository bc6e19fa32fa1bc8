"""Fixtures of the tests of the upstream-compatible `mooncake` package
(compat/python): mooncake.engine and the upstream tool names, and
mooncake.store (test_store*.py, with a store master of their own below).

libmooncake.so is $MOONCAKE_GO_LIB or build/libmooncake.so, the binary
$MC_MOONCAKE_BIN or bin/mooncake, the etcd helper bin/embedded-etcd; `make
test-compat-engine` builds all three. Missing ones skip the tests that need
them, saying how to build them. compat/python and abi/python are put on
sys.path here and in every child process (child_env).
"""

import os
import pathlib
import socket
import subprocess
import sys
import time
import types
import urllib.error
import urllib.request
import uuid

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
PY_DIRS = [str(REPO / "compat" / "python"), str(REPO / "abi" / "python")]
for d in reversed(PY_DIRS):
    if d not in sys.path:
        sys.path.insert(0, d)
LIB = os.environ.get("MOONCAKE_GO_LIB") or str(REPO / "build" / "libmooncake.so")
BIN = os.environ.get("MC_MOONCAKE_BIN") or str(REPO / "bin" / "mooncake")
ETCD = str(REPO / "bin" / "embedded-etcd")
os.environ.setdefault("MOONCAKE_GO_LIB", LIB)
os.environ.setdefault("MC_MOONCAKE_BIN", BIN)


def child_env(**extra):
    """Environment of a child Python process: the packages importable, the
    library and binary those of the tests (extra overrides; None removes)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(PY_DIRS + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(MOONCAKE_GO_LIB=LIB, MC_MOONCAKE_BIN=BIN)
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, what, timeout=30):
    """Polls until 127.0.0.1:port accepts a connection; fails when proc exits."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"{what} not listening on {port} after {timeout} s")
            time.sleep(0.05)


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def lib():
    if not os.path.exists(LIB):
        pytest.skip(f"{LIB} not built: run `make lib` at the repository root")
    return LIB


@pytest.fixture(scope="session")
def mooncake_bin():
    if not os.access(BIN, os.X_OK):
        pytest.skip(f"{BIN} not built: run `make build` at the repository root")
    return BIN


@pytest.fixture(scope="session")
def http_meta(mooncake_bin):
    """A `mooncake metadata-server` on a free loopback port; its URL."""
    port = free_port()
    proc = subprocess.Popen([mooncake_bin, "metadata-server", "--host", "127.0.0.1", "--port", str(port)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(port, proc, "mooncake metadata-server")
        yield f"http://127.0.0.1:{port}/metadata"
    finally:
        stop(proc)


@pytest.fixture(scope="session")
def etcd_meta():
    """A real single-member etcd (bin/embedded-etcd); its endpoint as an
    etcd:// connection string."""
    if not os.access(ETCD, os.X_OK):
        pytest.skip(f"{ETCD} not built: run `go build -o bin/embedded-etcd ./integration-tests/cmd/embedded-etcd`")
    proc = subprocess.Popen([ETCD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # the helper prints it once ready (bounded by its own 30 s)
        if not line.startswith("endpoint "):
            pytest.fail(f"embedded-etcd: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}")
        yield "etcd://" + line.split()[1]
    finally:
        proc.stdin.close()
        stop(proc)


@pytest.fixture(params=["http", "etcd", "p2p"])
def metadata(request):
    """The metadata connection string of each mode."""
    if request.param == "http":
        return request.getfixturevalue("http_meta")
    if request.param == "etcd":
        return request.getfixturevalue("etcd_meta")
    return "P2PHANDSHAKE"


@pytest.fixture
def engine(lib, http_meta):
    """An initialized TransferEngine on the HTTP metadata server."""
    from mooncake.engine import TransferEngine

    e = TransferEngine()
    assert e.initialize(f"127.0.0.1:{free_port()}", http_meta, "tcp", "") == 0
    return e


def master_proc(mooncake_bin, *extra):
    """A `mooncake master` on free loopback ports with its HTTP metadata
    server; (proc, namespace with .rpc and .meta)."""
    rpc, meta = free_port(), free_port()
    proc = subprocess.Popen([mooncake_bin, "master", "--rpc_address=127.0.0.1", f"--rpc_port={rpc}", "--metrics_port=0",
                             "--http_metadata_server_host=127.0.0.1", f"--http_metadata_server_port={meta}", *extra],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_listening(meta, proc, "mooncake master")
    return proc, types.SimpleNamespace(rpc=f"127.0.0.1:{rpc}", meta=f"http://127.0.0.1:{meta}/metadata")


def http_get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


# -- mooncake.store (test_store*.py) ------------------------------------------
#
# The pool is our `mooncake master` started the way upstream's
# scripts/run_tests.sh starts `mooncake_master`: gflags spellings
# `--flag=value`, a 500 ms lease (--default_kv_lease_ttl=500, which the
# lease waits rely on) and the embedded HTTP metadata server, on free
# 127.0.0.1 ports.

LEASE_MS = 500  # the store master's --default_kv_lease_ttl
MIB = 1 << 20


def eventually(cond, timeout=10.0, what="condition"):
    """Polls cond() until it returns a truthy value (returned) or timeout
    seconds pass (AssertionError naming what)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s (last: {v!r})")
        time.sleep(0.02)


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def store_master_proc(mooncake_bin):
    """A store master as run_tests.sh starts upstream's; (proc, .url, .rpc)."""
    proc, ns = master_proc(mooncake_bin, f"--default_kv_lease_ttl={LEASE_MS}", "--enable_http_metadata_server=true")
    return proc, types.SimpleNamespace(url=ns.meta, rpc=ns.rpc)


@pytest.fixture(scope="session")
def master(lib, mooncake_bin):
    """The store tests' master: .url (metadata), .rpc."""
    proc, ns = store_master_proc(mooncake_bin)
    try:
        yield ns
    finally:
        stop(proc)


@pytest.fixture
def loopback_clients(monkeypatch):
    """Store clients listen on 127.0.0.1 only (MC_TCP_BIND_ADDRESS)."""
    monkeypatch.setenv("MC_TCP_BIND_ADDRESS", "127.0.0.1")


@pytest.fixture
def make_store(master, loopback_clients):
    """make_store(global_segment_size=64 MiB, local_buffer_size=64 MiB,
    host="127.0.0.1") -> a set-up MooncakeDistributedStore (positional
    setup), closed at teardown."""
    from mooncake.store import MooncakeDistributedStore

    made = []

    def make(global_segment_size=64 * MIB, local_buffer_size=64 * MIB, host="127.0.0.1"):
        s = MooncakeDistributedStore()
        rc = s.setup(host, master.url, global_segment_size, local_buffer_size, "tcp", "", master.rpc)
        assert rc == 0, f"setup returned {rc}"
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


@pytest.fixture
def store(make_store):
    """A client contributing 64 MiB with a 64 MiB local buffer."""
    return make_store()


def remove_after_lease(store, key, force=False):
    """Removes key as soon as its lease (LEASE_MS) has ended (polling
    while remove answers -706); returns remove's final code."""
    codes = []

    def attempt():
        codes.append(store.remove(key, force))
        return codes[-1] != -706

    eventually(attempt, timeout=5 + 4 * LEASE_MS / 1000, what=f"the lease of {key} ending")
    return codes[-1]
