"""mcrig: what every real-engine test shares (vLLM, SGLang and LMCache;
NIXL later).

The tests run inside the engine's cached virtual environment (venv.sh)
and start real processes: `mooncake master` and `mooncake node` on free
127.0.0.1 ports (Pool), engine processes (Proc), and locally generated
tiny models with random weights (tiny_llama; no downloads). Every wait is
bounded by a deadline and a failure shows the tail of the process's log.

Paths come from the environment the make target sets, with the
repository's build outputs as defaults: MC_MOONCAKE_BIN (bin/mooncake),
MOONCAKE_GO_LIB (build/libmooncake.so), MC_MODEL_CACHE
(~/.cache/mooncake-go/models).
"""

import hashlib
import json
import os
import pathlib
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
ENGINES = REPO / "integration-tests" / "engines"

# Where the engines import our Python packages from. With MC_WHEEL_SITE
# (the make targets set it) that is the built wheel, unpacked (`make
# wheel-site`): mooncake_go with its bundled libmooncake.so and binary,
# mooncake_go.<engine>, and the upstream-compatible top-level `mooncake`
# (mooncake.store, mooncake.engine), exactly what `pip install` gives a
# user. Without it (a developer running one test by hand), the source
# folders: abi/python, <engine>/python (vllm, sglang, lmcache) and compat/python.
WHEEL_SITE = os.environ.get("MC_WHEEL_SITE")
if WHEEL_SITE:
    PYTHON_DIRS = [pathlib.Path(WHEEL_SITE)]
    COMPAT_PYTHON = pathlib.Path(WHEEL_SITE)
else:
    PYTHON_DIRS = [REPO / "abi" / "python", REPO / "vllm" / "python", REPO / "sglang" / "python", REPO / "lmcache" / "python"]
    # child_env(compat=True) puts it first on PYTHONPATH.
    COMPAT_PYTHON = REPO / "compat" / "python"


def mooncake_bin():
    return os.environ.get("MC_MOONCAKE_BIN") or str(REPO / "bin" / "mooncake")


def lib_path():
    """The libmooncake.so the engines load: the wheel's own under
    MC_WHEEL_SITE, else MOONCAKE_GO_LIB or build/libmooncake.so."""
    if WHEEL_SITE:
        return str(pathlib.Path(WHEEL_SITE) / "mooncake_go" / "libmooncake.so")
    return os.environ.get("MOONCAKE_GO_LIB") or str(REPO / "build" / "libmooncake.so")


def child_env(extra=None, drop=(), compat=False):
    """The environment of an engine process: mooncake_go importable from
    the source tree (and, with compat, our `mooncake` package in front),
    the library pinned, PYTHONHASHSEED fixed (instances only share blocks
    when they hash alike), plus extra; names in drop and names whose value
    in extra is None are removed."""
    env = dict(os.environ)
    dirs = ([COMPAT_PYTHON] if compat else []) + PYTHON_DIRS
    env["PYTHONPATH"] = os.pathsep.join([str(p) for p in dirs] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["MOONCAKE_GO_LIB"] = lib_path()
    env.setdefault("PYTHONHASHSEED", "0")
    env.update(extra or {})
    for k in drop:
        env.pop(k, None)
    return {k: v for k, v in env.items() if v is not None}


_handed_out = set()
_port_lock = threading.Lock()


def free_port():
    """A TCP port free on 127.0.0.1 and 0.0.0.0 now (for servers that
    cannot bind 0, e.g. vLLM's Mooncake bootstrap server).

    Drawn from 20000-32767, below Linux's ephemeral range (32768-60999),
    so that no process's outgoing connection or bind(0) can take it
    between now and the server's own bind (the race that failed CI:
    a concurrently starting engine got the port as an ephemeral one).
    Never hands the same port out twice in one process."""
    import random
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    with _port_lock:
        for _ in range(2000):
            port = rng.randrange(20000, 32768)
            if port in _handed_out:
                continue
            ok = True
            for host in ("0.0.0.0", "127.0.0.1"):
                with socket.socket() as s:
                    try:
                        s.bind((host, port))
                    except OSError:
                        ok = False
                        break
            if ok:
                _handed_out.add(port)
                return port
    raise AssertionError("free_port: no free TCP port in 20000-32767 after 2000 tries")


def wait_until(pred, timeout, what, tail=None, interval=0.1):
    """Polls pred() until it returns a true value (returned) or timeout
    seconds pass; then raises AssertionError naming what, with tail() (a
    log excerpt) when given."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}" + (f"\n--- log tail ---\n{tail()}" if tail else ""))
        time.sleep(interval)


class Proc:
    """A child process whose stdout and stderr go to log (a path); lines
    are also kept for wait_line. stop() ends it (SIGTERM, then SIGKILL)."""

    def __init__(self, args, log, env=None, stdin=None, cwd=None, name=None):
        self.args, self.log, self.name = list(args), pathlib.Path(log), name or pathlib.Path(args[0]).name
        self._lines = queue.Queue()
        self._seen = []
        self._out = open(self.log, "wb")
        self.p = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=stdin if stdin is not None else subprocess.DEVNULL,
            env=env, cwd=cwd, start_new_session=True,
        )
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self):
        for raw in iter(self.p.stdout.readline, b""):
            self._out.write(raw)
            self._out.flush()
            self._lines.put(raw.decode("utf-8", "replace").rstrip("\n"))
        self._out.close()
        self._lines.put(None)

    def tail(self, n=60):
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError as e:
            return f"({self.log}: {e})"
        return "\n".join(lines[-n:])

    def wait_line(self, pattern, timeout):
        """Returns the re.Match of the first new output line matching
        pattern; AssertionError with the log tail if the process exits or
        timeout seconds pass first."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{self.name}: no line matching {pattern!r} within {timeout:.0f} s\n--- {self.log} ---\n{self.tail()}")
            try:
                line = self._lines.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            if line is None:
                self.p.wait()
                raise AssertionError(f"{self.name} exited with {self.p.returncode} before printing {pattern!r}\n--- {self.log} ---\n{self.tail()}")
            self._seen.append(line)
            m = rx.search(line)
            if m:
                return m

    def wait(self, timeout):
        """Waits for the process to exit; returns its status, or raises
        AssertionError with the log tail after timeout seconds (the process
        is killed then)."""
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"{self.name} still running after {timeout:.0f} s (killed)\n--- {self.log} ---\n{self.tail()}") from None

    def alive(self):
        return self.p.poll() is None

    def stop(self, grace=20):
        """SIGTERM to the process group, SIGKILL after grace seconds."""
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.p.wait(grace)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.p.wait()
        self._reader.join(5)
        return self.p.returncode


class Pool:
    """`mooncake master` (gRPC, metrics off, embedded HTTP metadata server)
    and storage nodes on free 127.0.0.1 ports, for one test module.

    master: "127.0.0.1:PORT"; metadata: "http://127.0.0.1:PORT/metadata".
    Extra master flags go in master_args (e.g. a short lease). Node names
    get the test process's pid appended: segment names are unique per
    host (the shm transport's socket is named after them), and another
    pool may run on this machine."""

    def __init__(self, workdir, nodes=(("node1", "512MiB"),), master_args=()):
        self.workdir = pathlib.Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.procs = []
        bin = mooncake_bin()
        m = Proc(
            [bin, "master", "--rpc_address", "127.0.0.1", "--rpc_port", "0", "--metrics_port", "0",
             "--http_metadata_server_host", "127.0.0.1", "--http_metadata_server_port", "0", *master_args],
            self.workdir / "master.log", name="mooncake master",
        )
        self.procs.append(m)
        try:
            got = m.wait_line(r"mooncake master: rpc (\S+), metadata (\S+)", 60)
            self.master, self.metadata = got.group(1).rstrip(","), got.group(2)
            for name, size in nodes:
                self.add_node(name, size)
        except BaseException:
            # No caller holds the pool yet to close it: stop what started.
            for p in reversed(self.procs):
                p.stop()
            raise

    def add_node(self, name, size):
        name = f"{name}-{os.getpid()}"
        n = Proc(
            [mooncake_bin(), "node", "--master", self.master, "--metadata_server", self.metadata,
             "--segment_size", size, "--bind", "127.0.0.1:0", "--local_hostname", name],
            self.workdir / f"{name}.log", name=f"mooncake node {name}",
        )
        self.procs.append(n)
        n.wait_line(r"contributes", 60)
        return n

    def ctl(self, *args, timeout=60):
        """Runs `mooncake ctl --master M ARGS...`; returns stdout; raises
        AssertionError with its output on a non-zero exit."""
        r = subprocess.run([mooncake_bin(), "ctl", "--master", self.master, *args], capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise AssertionError(f"mooncake ctl {' '.join(args)}: exit {r.returncode}: {r.stdout}{r.stderr}")
        return r.stdout

    def keys(self, prefix=""):
        """{key: size in bytes} of the complete objects whose key starts
        with prefix (every key: `ctl keys` lists 1000 by default)."""
        out = {}
        for line in self.ctl("keys", "--limit", "0").splitlines()[1:]:
            f = line.split()
            if len(f) >= 3 and f[0].startswith(prefix) and f[2] == "complete":
                out[f[0]] = int(f[1])
        return out

    def tails(self):
        return "\n".join(f"--- {p.log} ---\n{p.tail(20)}" for p in self.procs)

    def stop(self):
        for p in reversed(self.procs):
            p.stop()


def unchanged_file(dist, relpath):
    """The absolute path of relpath (e.g. "sglang/srt/.../test_x.py") as
    installed by distribution dist, after checking its bytes against the
    sha256 the wheel's RECORD lists for it: a test that says it runs an
    engine's own file unchanged proves it. AssertionError naming the file
    when it is missing, unlisted or modified."""
    import base64
    from importlib import metadata

    d = metadata.distribution(dist)
    for f in d.files or ():
        if str(f) == relpath:
            path = pathlib.Path(f.locate()).resolve()
            if f.hash is None or f.hash.mode != "sha256":
                raise AssertionError(f"{dist} {d.version}: RECORD lists no sha256 for {relpath}")
            if not path.is_file():
                raise AssertionError(f"{dist} {d.version}: {path} is not installed")
            got = base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()
            if got != f.hash.value:
                raise AssertionError(f"{dist} {d.version}: {path} differs from the wheel (sha256 {got}, RECORD {f.hash.value})")
            return str(path)
    raise AssertionError(f"{dist} {d.version}: {relpath} is not in the wheel's RECORD")


def no_upstream_mooncake(python=sys.executable):
    """Asserts that python's environment, without our PYTHONPATH, has no
    `mooncake` package and no mooncake* distribution (upstream's
    mooncake-transfer-engine*): the engines' `import mooncake.store` can
    then only find ours."""
    probe = ("import importlib.util, json\nfrom importlib import metadata\n"
             "s = importlib.util.find_spec('mooncake')\n"
             "print(json.dumps([s and s.origin, sorted(d.metadata['Name'] for d in metadata.distributions()"
             " if d.metadata['Name'].lower().startswith('mooncake'))]))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([python, "-c", probe], env=env, capture_output=True, text=True, timeout=120, cwd="/")
    if r.returncode != 0:
        raise AssertionError(f"probing {python} failed: {r.stderr[-2000:]}")
    origin, dists = json.loads(r.stdout.strip().splitlines()[-1])
    if origin or dists:
        raise AssertionError(f"{python}'s environment has upstream's mooncake: package at {origin}, distributions {dists}")


# A tiny Llama: 4 layers, 2 KV heads of 64 (bfloat16), 4096-token vocab:
# fast enough that a vLLM process on 2 cores generates in under a second.
TINY_LLAMA = dict(
    hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
    vocab_size=4096, max_position_embeddings=4096,
)

_MODEL_WRITER = r"""
import json, sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
cfg, seed, out = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.manual_seed(seed)
model = LlamaForCausalLM(LlamaConfig(**cfg)).to(torch.bfloat16)
model.config.torch_dtype = "bfloat16"
model.save_pretrained(out)
"""


def tiny_llama(python, config=None, seed=0, timeout=600):
    """The path of a Llama with random weights (seed) and config (default
    TINY_LLAMA), written once with transformers by the engine venv's python
    into MC_MODEL_CACHE (~/.cache/mooncake-go/models)/<hash> and reused:
    the same config and seed give the same weights, hence the same greedy
    tokens in every run."""
    config = dict(config or TINY_LLAMA)
    key = hashlib.sha256(json.dumps([config, seed], sort_keys=True).encode()).hexdigest()[:12]
    root = pathlib.Path(os.environ.get("MC_MODEL_CACHE") or pathlib.Path.home() / ".cache" / "mooncake-go" / "models")
    path = root / f"llama-{config['num_hidden_layers']}l-{config['hidden_size']}h-{key}"
    if (path / ".complete").exists():
        return str(path)
    root.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    r = subprocess.run([python, "-c", _MODEL_WRITER, json.dumps(config), str(seed), str(tmp)], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"writing the random model failed ({r.returncode}):\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    (tmp / ".complete").touch()
    try:
        tmp.rename(path)
    except OSError:  # another run made it meanwhile
        if not (path / ".complete").exists():
            raise
    return str(path)


__all__ = ["REPO", "ENGINES", "COMPAT_PYTHON", "Pool", "Proc", "child_env", "free_port", "lib_path", "mooncake_bin", "no_upstream_mooncake", "tiny_llama", "unchanged_file", "wait_until", "TINY_LLAMA"]
if __name__ == "__main__":  # python mcrig.py: print the paths it would use
    print(json.dumps({"repo": str(REPO), "bin": mooncake_bin(), "lib": lib_path(), "python": sys.executable}))
