"""mooncake.store's tensor helpers (put_tensor, get_tensor, their batch,
_into, _from, pub_ and upsert_ forms) against our pool. torch is needed:
`make test-compat` runs this file with the vLLM engine environment's
Python (integration-tests/engines/venv.sh vllm), which has torch; under a
Python without torch it is skipped.
"""

import ctypes
import mmap
import subprocess
import sys
import textwrap

import pytest

from conftest import MIB, child_env, unique

torch = pytest.importorskip("torch")

from mooncake import store as ms  # noqa: E402
from mooncake.store import ReplicateConfig  # noqa: E402

pytestmark = pytest.mark.usefixtures("loopback_clients")


def tensors():
    g = torch.Generator().manual_seed(7)
    return [
        torch.randn(3, 5, generator=g),
        torch.arange(24, dtype=torch.int64).reshape(2, 3, 4),
        torch.randn(16, generator=g).to(torch.bfloat16),
        torch.randn(4, 4, generator=g).to(torch.float16).t(),  # not contiguous
        torch.tensor([True, False, True]),
        torch.tensor(3.5, dtype=torch.float64),  # 0-dim
        torch.empty(0, 7, dtype=torch.int32),  # no elements
        torch.randint(0, 255, (9,), dtype=torch.uint8, generator=g),
    ]


def same(a, b):
    return a is not None and b is not None and a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and torch.equal(a, b)


def test_serialize_roundtrip_without_pool():
    for t in tensors():
        meta, ptr, n, owner = ms._serialize_tensor(t)
        assert len(meta) == ms._tensor_metadata_size() == 304
        payload = meta + ctypes.string_at(ptr, n)
        assert same(ms._deserialize_tensor(payload), t.contiguous())
    with pytest.raises(ValueError):
        ms._serialize_tensor([1, 2, 3])
    with pytest.raises(ValueError):
        ms._deserialize_tensor(b"\0" * 400)


def test_put_get_tensor(store):
    keys = [unique("t") for _ in tensors()]
    for k, t in zip(keys, tensors()):
        assert store.put_tensor(k, t) == 0
        assert same(store.get_tensor(k), t.contiguous())
    assert store.get_tensor(unique("missing")) is None
    assert store.put_tensor(unique("notatensor"), [1, 2]) == -600
    assert store.put(unique("raw"), b"not a tensor object") == 0
    got = store.batch_get_tensor(keys + [unique("missing")])
    assert all(same(a, b.contiguous()) for a, b in zip(got, tensors()))
    assert got[-1] is None
    bk = [unique("bt") for _ in range(3)]
    assert store.batch_put_tensor(bk, tensors()[:3]) == [0, 0, 0]
    assert store.batch_put_tensor(bk, tensors()[:2]) == [-600] * 3
    cfg = ReplicateConfig()
    cfg.with_hard_pin = True
    assert store.pub_tensor(unique("pub"), tensors()[0], cfg) == 0
    assert store.batch_pub_tensor([unique("bp")], tensors()[:1], cfg) == [0]
    # The returned tensor owns its memory: writing it does not touch the pool.
    t = store.get_tensor(keys[0])
    t += 1
    assert same(store.get_tensor(keys[0]), tensors()[0])


def test_tensor_into_and_from(store):
    m = mmap.mmap(-1, 4 * MIB)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    assert store.register_buffer(base, 4 * MIB) == 0
    t = tensors()[1]
    k = unique("into")
    assert store.put_tensor(k, t) == 0
    view = store.get_tensor_into(k, base, MIB)
    assert same(view, t)
    assert view.data_ptr() == base + ms._tensor_metadata_size()  # a view of the buffer
    assert store.get_tensor_into(unique("missing"), base, MIB) is None
    assert store.get_tensor_into(k, base, 100) is None  # too small
    ks = [k, unique("missing")]
    got = store.batch_get_tensor_into(ks, [base, base + MIB], [MIB, MIB])
    assert same(got[0], t) and got[1] is None
    assert store.batch_get_tensor_into(ks, [base], [MIB]) == [-600, -600]

    # put_tensor_from: the buffer already holds [header][elements].
    meta, ptr, n, _ = ms._serialize_tensor(tensors()[0])
    dst = base + 2 * MIB
    ctypes.memmove(dst, meta, len(meta))
    ctypes.memmove(dst + len(meta), ptr, n)
    k2 = unique("from")
    assert store.put_tensor_from(k2, dst, len(meta) + n) == 0
    assert same(store.get_tensor(k2), tensors()[0])
    assert store.put_tensor_from(unique("short"), dst, 100) == -600
    assert store.put_tensor_from(unique("bad"), dst, len(meta) + n - 4) == -600  # header disagrees with size
    assert store.batch_put_tensor_from([unique("bf"), unique("bf")], [dst, 0], [len(meta) + n] * 2) == [-600, -600]
    assert store.upsert_tensor_from(k2, dst, len(meta) + n) == 0
    assert store.upsert_tensor(k2, tensors()[2]) == 0
    assert same(store.get_tensor(k2), tensors()[2])
    assert store.batch_upsert_tensor([k2], [tensors()[3]]) == [0]
    assert same(store.get_tensor(k2), tensors()[3].contiguous())
    store.unregister_buffer(base)


def test_torch_is_imported_lazily():
    code = textwrap.dedent(
        """
        import sys
        from mooncake.store import MooncakeDistributedStore, ReplicateConfig
        MooncakeDistributedStore().put_tensor("k", None)
        print("torch" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False"]
