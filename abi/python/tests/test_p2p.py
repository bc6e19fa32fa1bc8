"""mooncake_go.p2p (mc_p2p_*) against an embedded etcd (bin/embedded-etcd,
built by `make test-abi`): a seed registers buffers, getters fetch them,
the seed leaves, a later getter completes from a peer; errors raise with
p2p.h's codes."""

import os
import pathlib
import subprocess

import pytest

import mc_te

ETCD_BIN = os.environ.get("MC_EMBEDDED_ETCD", str(mc_te.REPO / "bin" / "embedded-etcd"))


@pytest.fixture(scope="module")
def etcd():
    if not pathlib.Path(ETCD_BIN).exists():
        pytest.skip(f"{ETCD_BIN} not built: go build -o bin/embedded-etcd ./integration-tests/cmd/embedded-etcd")
    proc = subprocess.Popen([ETCD_BIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().split()
        assert line and line[0] == "endpoint", f"embedded-etcd said {line!r}"
        yield line[1]
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


def pattern(n, seed):
    return bytearray((i * 131 + seed) & 0xFF for i in range(n))


def test_seed_getters_and_errors(lib_path, etcd):
    from mooncake_go import p2p
    from mooncake_go.errors import ERR_INVALID_ARGUMENT, ERR_NOT_FOUND, MooncakeError

    src = [pattern(200_000, 1), pattern(30_001, 2)]
    with p2p.P2PStore(etcd, "py-seed") as seed, p2p.P2PStore(etcd, "py-g1") as g1, p2p.P2PStore(etcd) as g2:
        seed.register("py/ckpt", src, max_shard_size=16 << 10)
        [info] = g1.list("py/")
        assert info["name"] == "py/ckpt"
        assert info["size_list"] == [200_000, 30_001]
        assert info["shards"] == 13 + 2
        assert info["holders"] == 1 and info["origin"] == "py-seed"

        d1 = [bytearray(200_000), bytearray(30_001)]
        g1.get_replica("py/ckpt", d1)
        assert d1 == src
        seed.unregister("py/ckpt")
        src[0][:] = bytes(200_000)  # the seed's memory is the caller's again

        import ctypes

        raw = [ctypes.create_string_buffer(200_000), ctypes.create_string_buffer(30_001)]
        g2.get_replica("py/ckpt", [(ctypes.addressof(b), len(b)) for b in raw])
        assert [b.raw for b in raw] == [bytes(b) for b in d1]

        with pytest.raises(MooncakeError) as e:
            g2.get_replica("py/none", [bytearray(10)])
        assert e.value.code == ERR_NOT_FOUND
        with pytest.raises(MooncakeError) as e:
            seed.get_replica("py/ckpt", [bytearray(10)])
        assert e.value.code == p2p.P2P_ERR_SIZE
        with pytest.raises(MooncakeError) as e:
            seed.delete_replica("py/ckpt")
        assert e.value.code == p2p.P2P_ERR_NOT_OPENED
        with pytest.raises(MooncakeError) as e:
            g1.get_replica("py/x", [b"read-only"])
        assert e.value.code == ERR_INVALID_ARGUMENT

        g1.delete_replica("py/ckpt")
        g2.delete_replica("py/ckpt")
        assert g2.list("py/") == []


def test_torch_tensors(lib_path, etcd):
    torch = pytest.importorskip("torch")
    from mooncake_go import p2p

    w = torch.arange(50_000, dtype=torch.float32)
    b = torch.ones(7, 3, dtype=torch.bfloat16)
    with p2p.P2PStore(etcd) as seed, p2p.P2PStore(etcd) as peer:
        seed.register("py/torch", [w, b])
        dst = [torch.empty_like(w), torch.empty_like(b)]
        peer.get_replica("py/torch", dst)
        assert torch.equal(dst[0], w) and torch.equal(dst[1], b)
