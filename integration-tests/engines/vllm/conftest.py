"""Fixtures of the real-vLLM tests: one pool (`mooncake master` + a
`mooncake node`) for the session, the tiny random Llama, and Driver, one
real vLLM instance in its own process (driver.py).

Run by `make test-vllm-engine` (part of `make test`) with the cached vLLM
environment's python: integration-tests/engines/venv.sh vllm.
"""

import itertools
import json
import os
import pathlib
import queue
import subprocess
import sys
import threading
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import mcrig  # noqa: E402

# The tests themselves use mooncake_go (the store client) from the tree.
for _p in mcrig.PYTHON_DIRS:
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

# Bounds of the waits, in seconds: generous, since two vLLM processes may
# start at once on a shared 2-core machine.
START_TIMEOUT = float(os.environ.get("MC_ENGINE_START_TIMEOUT", 420))
CMD_TIMEOUT = float(os.environ.get("MC_ENGINE_CMD_TIMEOUT", 300))

BLOCK = 32  # tokens per KV block: vLLM's CPU attention needs a multiple of 32

# LLM() arguments every instance shares: this machine's settings from
# shared/specs/real-engines-on-cpu.md, greedy-friendly and small.
ENGINE = dict(
    skip_tokenizer_init=True, dtype="bfloat16", gpu_memory_utilization=0.25, max_model_len=2048,
    enforce_eager=True, block_size=BLOCK, disable_log_stats=False, seed=0,
)

BASE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false", "VLLM_LOGGING_LEVEL": "INFO"}

CONNECTOR = {"kv_connector": "MooncakeGoConnector", "kv_connector_module_path": "mooncake_go.vllm"}


def prompt(seed, n):
    """n token ids in [1, 4000), a deterministic function of seed."""
    return [(seed * 7919 + j * 104729 + (j * j) % 97) % 3999 + 1 for j in range(n)]


_cores = itertools.count()


def cpu_bind_env():
    """VLLM_CPU_OMP_THREADS_BIND for the next instance: each its own core,
    round robin. vLLM's CPU worker binds every thread of its process (ours
    too) to the cores this names; left to "auto", every instance on this
    2-core machine takes core 0, and two instances there (a P/D pair, two
    loaders at once) starve each other: an idle worker busy-polls its
    queue (sched_yield) while its engine core steps, so the other's
    forward and the Go side's servers wait tens of seconds."""
    n = os.cpu_count() or 1
    return {"VLLM_CPU_OMP_THREADS_BIND": str(next(_cores) % n)}


class Driver:
    """One vLLM instance (driver.py) with its own log file. cmd() sends a
    command and returns the reply; any error reply or timeout raises
    AssertionError with the instance's log tail."""

    def __init__(self, name, workdir, model, engine=None, ktc=None, env=None, drop_env=()):
        self.name = name
        self.log = pathlib.Path(workdir) / f"{name}.log"
        cfg = {"model": model, "engine": {**ENGINE, **(engine or {})}, "kv_transfer_config": ktc}
        self._err = open(self.log, "wb")
        self.p = subprocess.Popen(
            [sys.executable, str(HERE / "driver.py"), json.dumps(cfg)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
            env=mcrig.child_env({**BASE_ENV, **cpu_bind_env(), **(env or {})}, drop=drop_env), start_new_session=True,
        )
        self._replies = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.started = None

    def _pump(self):
        for line in iter(self.p.stdout.readline, b""):
            self._replies.put(line)
        self._replies.put(None)

    def tail(self, n=80):
        return mcrig.Proc.tail(self, n)

    def _read(self, timeout, what):
        try:
            line = self._replies.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"{self.name}: no answer to {what} within {timeout:.0f} s\n--- {self.log} ---\n{self.tail()}") from None
        if line is None:
            self.p.wait()
            raise AssertionError(f"{self.name}: exited with {self.p.returncode} during {what}\n--- {self.log} ---\n{self.tail()}")
        r = json.loads(line)
        if "error" in r:
            raise AssertionError(f"{self.name}: {what} failed:\n{r['error']}\n--- {self.log} ---\n{self.tail()}")
        return r

    def ready(self, timeout=START_TIMEOUT):
        if self.started is None:
            self.started = self._read(timeout, "start-up")
        return self

    def cmd(self, op, timeout=CMD_TIMEOUT, **args):
        self.ready()
        self.p.stdin.write((json.dumps({"op": op, **args}) + "\n").encode())
        self.p.stdin.flush()
        return self._read(timeout, op)

    def generate(self, prompts, max_tokens=8, kv_transfer_params=None):
        return self.cmd("generate", prompts=prompts, max_tokens=max_tokens, kv_transfer_params=kv_transfer_params)["outputs"]

    def tokens(self, prompts, max_tokens=8):
        return [o["tokens"] for o in self.generate(prompts, max_tokens)]

    def metrics(self):
        return self.cmd("metrics")["metrics"]

    def metrics_until(self, pred, what, timeout=120):
        """Polls metrics() until pred(metrics) holds and returns them;
        AssertionError naming what (with the log tail and the last
        metrics) after timeout seconds. For counters of transfers that may
        complete after generate returned (saves of finished requests)."""
        last = {}

        def ok():
            last["m"] = self.metrics()
            return pred(last["m"])

        try:
            mcrig.wait_until(ok, timeout, f"{self.name}: {what}", tail=self.tail, interval=0.2)
        except AssertionError as e:
            raise AssertionError(f"{e}\nlast metrics: {last.get('m')}") from None
        return last["m"]

    def close(self, timeout=120):
        """Asks the instance to exit (vLLM shuts down: connectors close and
        unmount their segments); kills it after timeout seconds."""
        if self.p.poll() is None:
            try:
                self.cmd("exit", timeout=timeout)
            except (AssertionError, BrokenPipeError, OSError):
                pass
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, 9)
                self.p.wait()
        self._err.close()
        return self.p.returncode

    def kill(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, 9)
            self.p.wait()
        self._err.close()


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    d = os.environ.get("MC_ENGINE_LOGS")
    if d:
        p = pathlib.Path(d)
        p.mkdir(parents=True, exist_ok=True)
        return p
    return tmp_path_factory.mktemp("vllm")


@pytest.fixture(scope="session")
def model():
    return mcrig.tiny_llama(sys.executable)


@pytest.fixture(scope="session")
def pool(workdir):
    """The session's pool: a master (1 s read leases, so a test may
    overwrite an object soon after a read) and a 512 MiB node."""
    p = mcrig.Pool(workdir / "pool", master_args=["--default_kv_lease_ttl", "1000"])
    yield p
    p.stop()


@pytest.fixture
def start(workdir, model, request):
    """start(name, ...) -> a ready Driver, closed at the end of the test
    (the log is kept in workdir)."""
    drivers = []

    def _start(name, wait=True, **kw):
        d = Driver(f"{request.node.name}-{name}", workdir, model, **kw)
        drivers.append(d)
        return d.ready() if wait else d

    yield _start
    for d in drivers:
        d.close()


# The prompt sets of every test, generated once without a connector by the
# session's baseline instance: a batch with several full blocks, prompts
# ending mid-block (77, 250 tokens), one of exactly two blocks (64) and one
# sharing its first five blocks with another (205 tokens).
PROMPT_SETS = {
    "store": [prompt(1, 100), prompt(2, 250), prompt(3, 64), prompt(4, 77), prompt(2, 250)[:160] + prompt(5, 45)],
    "layerwise": [prompt(11, 130), prompt(12, 96), prompt(13, 33)],
    "pd": [prompt(21, 150), prompt(22, 64), prompt(23, 201), prompt(24, 40)],
    "hung": [prompt(60 + i, 70) for i in range(10)],
}


@pytest.fixture(scope="session")
def baseline(workdir, model):
    """{set name: greedy token ids (8 per prompt)} of PROMPT_SETS from one
    vLLM instance without any connector."""
    d = Driver("baseline", workdir, model).ready()
    try:
        return {name: d.tokens(ps) for name, ps in PROMPT_SETS.items()}
    finally:
        d.close()


def store_config(pool, **extra):
    """kv_connector_extra_config naming the session's pool (our extension:
    pool keys without MOONCAKE_CONFIG_PATH), tcp, standalone-store (the
    engine contributes no memory, so blocks outlive it)."""
    return {
        "master_server_address": pool.master, "metadata_server": pool.metadata, "protocol": "tcp",
        "mode": "standalone-store", "global_segment_size": 0, "local_buffer_size": "64MB", **extra,
    }
