"""Our own SGLang HiCache storage backend (mooncake_go.sglang, class
MooncakeGoHiCacheStorage) inside SGLang 0.5.23's real storage code, run
with the cached SGLang environment's python (integration-tests/engines/
venv.sh sglang) on a `mooncake master` + `mooncake node` (mcrig.Pool),
our packages imported from the built wheel (`make wheel-site`).

hicache_driver.py does the SGLang side: StorageBackendFactory.
create_backend("dynamic", ...) with backend_name/module_path/class_name/
interface_v1 in the extra config builds our class, and SGLang's own
MHATokenToKVPoolHost / MLATokenToKVPoolHost (built from SGLang's device
pools on CPU) hold the pages, in each layout SGLang offers (layer_first,
page_first, page_first_direct).

Run by `make test-sglang-mooncake` (part of `make test`).
"""

import json
import os
import pathlib
import re
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import mcrig  # noqa: E402

RUN_TIMEOUT = float(os.environ.get("MC_ENGINE_CMD_TIMEOUT", 300))
DRIVER = str(HERE / "hicache_driver.py")
PAGE_KEY = re.compile(r"^mc/v1/tiny%2Fllama[^/]*/bfloat16/sglang-(mha|mla)-(lt|tl)-l3/(tp\d+of\d+|mla)/pp0of1/bt4/[0-9a-z]{64}/(k|v|kv)$")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = os.environ.get("MC_ENGINE_LOGS")
    if d:
        p = pathlib.Path(d) / "sglang-hicache"
        p.mkdir(parents=True, exist_ok=True)
        return p
    return tmp_path_factory.mktemp("sglang-hicache")


@pytest.fixture
def pool(workdir, request):
    """A master and a 256 MiB storage node; the SGLang processes contribute no memory."""
    p = mcrig.Pool(workdir / f"pool-{request.node.name}", nodes=(("sglnode", "256MiB"),))
    yield p
    p.stop()


def extra_of(pool):
    """The pool keys of --hicache-storage-backend-extra-config (SGLang's names)."""
    return {
        "master_server_address": pool.master, "metadata_server": pool.metadata, "protocol": "tcp",
        "global_segment_size": 0, "local_hostname": "127.0.0.1",
    }


def driver(args, log, stdin=None):
    env = mcrig.child_env({"MC_TCP_BIND_ADDRESS": "127.0.0.1"})
    return mcrig.Proc([sys.executable, "-W", "ignore", DRIVER, *args], log, env=env, stdin=stdin, name=f"hicache_driver {args[0]}")


def summary(proc, log, pool, rc):
    lines = [ln for ln in pathlib.Path(log).read_text(errors="replace").splitlines() if ln.startswith("{")]
    s = json.loads(lines[-1]) if lines else {}
    assert rc == 0 and s.get("ok"), f"{proc.name} exited {rc}: {s.get('error')}\n--- {log} ---\n{proc.tail(60)}\n{pool.tails()}"
    return s


def run(args, workdir, pool, tag):
    log = workdir / f"driver-{tag}.log"
    p = driver(args, log)
    return summary(p, log, pool, p.wait(RUN_TIMEOUT))


@pytest.mark.skipif(not mcrig.WHEEL_SITE, reason="MC_WHEEL_SITE not set: the tests import the source tree (run through make)")
def test_backend_comes_from_the_wheel():
    """SGLang imports module_path mooncake_go.sglang from the built wheel, with the wheel's libmooncake.so."""
    import subprocess

    probe = "import mooncake_go, mooncake_go.sglang as m; from mooncake_go.sglang import _abi; print(m.__file__); print(_abi._lib_handle()._name)"
    out = subprocess.run([sys.executable, "-c", probe], env=mcrig.child_env(), capture_output=True, text=True, timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr
    site = pathlib.Path(mcrig.WHEEL_SITE).resolve()
    paths = [pathlib.Path(line).resolve() for line in out.stdout.split()]
    assert len(paths) == 2 and all(site in p.parents for p in paths), (paths, site)


def test_roundtrip_every_layout_mha_and_mla(pool, workdir):
    """create_backend("dynamic") builds our class; for MHA and MLA in
    layer_first, page_first and page_first_direct: pages written through
    batch_set_v1 and the plain batch_set/set, the host pool zeroed, read
    back byte for byte through batch_get_v1 (into other slots) and the
    plain batch_get/get; batch_exists counts a prefix only partly in the
    pool; get_stats reports the pages; clear empties our namespace."""
    s = run(["roundtrip", json.dumps(extra_of(pool))], workdir, pool, "roundtrip")
    assert s["cases"] == [f"{k}/{lay}" for k in ("MHA", "MLA") for lay in ("layer_first", "page_first", "page_first_direct")]
    # clear removed every page object: only nothing of ours is left.
    left = {k: v for k, v in pool.keys().items() if k.startswith("mc/v1/")}
    assert not left, sorted(left)[:5]


def test_two_processes_share_pages(pool, workdir):
    """One SGLang process backs pages up through batch_set_v1 and exits; a
    second one finds them with batch_exists and reads them byte for byte
    through batch_get_v1: MHA page_first at TP 1, and MLA layer_first
    written by TP rank 0 and read by TP rank 1 of 2 (rank-free keys). The
    pool holds, on the node, two objects per MHA page (K, V) and one per
    MLA page, of all layers."""
    extra = json.dumps(extra_of(pool))
    w = run(["write", extra, json.dumps([["page_first", False, 0, 1], ["layer_first", True, 0, 2]])], workdir, pool, "write")
    assert w["write"] == ["MHA/page_first/tp0of1", "MLA/layer_first/tp0of2"], w
    keys = {k: v for k, v in pool.keys().items() if k.startswith("mc/v1/")}
    odd = [k for k in keys if not PAGE_KEY.match(k)]
    assert not odd, odd[:4]
    # Object sizes: an MHA K (or V) object is heads x head_dim x layers x
    # tokens x 2 bytes (bfloat16); an MLA one the 40-wide latent x layers x tokens x 2.
    mha = {k: v for k, v in keys.items() if "/sglang-mha-" in k}
    mla = {k: v for k, v in keys.items() if "/sglang-mla-" in k}
    assert len(mha) == 32 and sum(k.endswith("/k") for k in mha) == 16 and all("/tp0of1/" in k for k in mha), sorted(mha)[:4]
    assert set(mha.values()) == {2 * 16 * 3 * 4 * 2}, set(mha.values())
    assert len(mla) == 16 and all(k.endswith("/kv") and "/mla/" in k for k in mla), sorted(mla)[:4]
    assert set(mla.values()) == {40 * 3 * 4 * 2}, set(mla.values())
    assert len(keys) == 48, sorted(keys)[:4]
    r = run(["read", extra, json.dumps([["page_first", False, 0, 1], ["layer_first", True, 1, 2]])], workdir, pool, "read")
    assert r["read"] == ["MHA/page_first/tp0of1", "MLA/layer_first/tp1of2"], r


def test_dead_master_gives_misses_in_time(pool, workdir):
    """The master dies under a running backend: batch_exists answers 0 and
    batch_get_v1 all misses within SGLang's prefetch timeout (1 s + 0.25 s
    per 1,024 tokens), batch_set_v1 fails, nothing raises, the failures
    are counted."""
    log = workdir / "driver-deadmaster.log"
    import subprocess

    p = driver(["deadmaster", json.dumps(extra_of(pool))], log, stdin=subprocess.PIPE)
    try:
        p.wait_line(r"^READY$", RUN_TIMEOUT)
        pool.procs[0].stop()  # the master
        p.p.stdin.write(b"go\n")
        p.p.stdin.flush()
        s = summary(p, log, pool, p.wait(RUN_TIMEOUT))
    finally:
        p.stop()
    assert s["times"]["batch_exists"] <= s["limit"] and s["times"]["batch_get_v1"] <= s["limit"], s
