"""Fixtures of the libmooncake.so ctypes tests.

libmooncake.so is $MC_LIBMOONCAKE or build/libmooncake.so; the metadata
server is `mooncake master` from $MC_MOONCAKE_BIN or bin/mooncake. Both are
built by `make test-abi`; without them the tests skip and say how to build.
The mooncake_go package (abi/python) is importable from the tests, and its
loader is pointed at the same library ($MOONCAKE_GO_LIB), here and in the
child processes the tests start.
"""

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import types
import urllib.error
import urllib.request

import pytest

import mc_te

PYTHON_DIR = str(mc_te.REPO / "abi" / "python")
if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)
os.environ.setdefault("MOONCAKE_GO_LIB", mc_te.library_path())


def child_env(**extra):
    """Environment for a child Python process: mooncake_go importable, the
    loader pointed at the tests' library unless extra says otherwise."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PYTHON_DIR, env.get("PYTHONPATH")) if p)
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def lib_path():
    path = mc_te.library_path()
    if not os.path.exists(path):
        pytest.skip(f"{path} not built: run `make lib` at the repository root or set {mc_te.ENV_LIBRARY}")
    return path


@pytest.fixture(scope="session")
def mooncake_bin():
    path = os.environ.get("MC_MOONCAKE_BIN") or str(mc_te.REPO / "bin" / "mooncake")
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} not built: run `make build` at the repository root or set MC_MOONCAKE_BIN")
    return path


@pytest.fixture(scope="session")
def master(master_info):
    """The metadata URL of the session's `mooncake master`."""
    return master_info.url


@pytest.fixture(scope="session")
def master_info(mooncake_bin, tmp_path_factory):
    """A `mooncake master` on free loopback ports; yields its metadata URL
    (.url) and RPC address (.rpc)."""
    meta_port, rpc_port = free_port(), free_port()
    log = tmp_path_factory.mktemp("master") / "master.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                mooncake_bin, "master",
                "--rpc_address", "127.0.0.1", "--rpc_port", str(rpc_port),
                "--metrics_port", "0",
                "--http_metadata_server_host", "127.0.0.1",
                "--http_metadata_server_port", str(meta_port),
            ],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    url = f"http://127.0.0.1:{meta_port}/metadata"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"mooncake master exited with {proc.returncode}: {log.read_text()}")
            try:
                urllib.request.urlopen(url + "?key=readiness-probe", timeout=1)
                break
            except urllib.error.HTTPError:  # 404 for the unknown key: serving
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"mooncake master not serving {url} after 30 s: {log.read_text()}")
                time.sleep(0.05)
        yield types.SimpleNamespace(url=url, rpc=f"127.0.0.1:{rpc_port}")
    finally:
        stop(proc)


def stop(proc):
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def pool(mooncake_bin, master_info, tmp_path_factory):
    """The session's master plus a `mooncake node` contributing 64 MiB as
    segment node1; yields the master's .url and .rpc once the node is
    mounted (it says so on stderr)."""
    log = tmp_path_factory.mktemp("node") / "node.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                mooncake_bin, "node",
                "--master", master_info.rpc,
                "--metadata_server", master_info.url,
                "--segment-size", "64MiB",
                "--bind", "127.0.0.1:0",
                "--local_hostname", "node1",
            ],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 30
        while "contributes" not in log.read_text():
            if proc.poll() is not None:
                pytest.fail(f"mooncake node exited with {proc.returncode}: {log.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"mooncake node not mounted after 30 s: {log.read_text()}")
            time.sleep(0.05)
        yield master_info
    finally:
        stop(proc)


class Peer:
    """A child process speaking JSON lines (te_peer.py)."""

    def __init__(self, args, env=None):
        self.proc = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self.lines = queue.Queue()
        self.err = []
        threading.Thread(target=self._pump_stdout, daemon=True).start()
        threading.Thread(target=self._pump_stderr, daemon=True).start()

    def _pump_stdout(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)  # EOF: the process is gone

    def _pump_stderr(self):
        for line in self.proc.stderr:
            self.err.append(line)

    def read(self, timeout):
        """The next JSON message; fails the test on timeout or exit."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no message from {self.proc.args[2]} within {timeout} s; stderr: {''.join(self.err)}")
        if line is None:
            self.proc.wait(5)
            raise AssertionError(f"{self.proc.args[2]} exited ({self.proc.returncode}); stderr: {''.join(self.err)}")
        return json.loads(line)

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def close(self, timeout=30):
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


@pytest.fixture
def peers():
    """Starts Peer processes; kills any still running at teardown."""
    started = []

    def start(args):
        p = Peer(args)
        started.append(p)
        return p

    yield start
    for p in started:
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait()
