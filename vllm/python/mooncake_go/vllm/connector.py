"""MooncakeGoConnector: vLLM's KVConnectorBase_V1 over libmooncake.so.

The scheduler half (KVConnectorRole.SCHEDULER, in the EngineCore process)
and the worker half (KVConnectorRole.WORKER, one per TP/PP rank) each own
one mc_vllm connector; they talk only through the metadata the scheduler
half builds each step (MooncakeGoMetadata, opaque bytes vLLM ships to the
workers) and through the worker outputs vLLM aggregates (finished sets,
failed blocks). Everything that moves bytes runs on Go threads.

Hot-path hooks never raise into vLLM: a failed lookup is a miss, a failed
load is reported through get_block_ids_with_load_errors and the request's
finished-receiving, a failed save is logged.
"""

import collections
import json
import logging
import os
import threading

from . import _abi
from . import stats as _stats

try:  # the real base classes when vLLM is installed
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (
        KVConnectorBase_V1,
        KVConnectorMetadata,
        KVConnectorRole,
    )
except ImportError:  # vLLM absent: the same surface, for tests and tools
    import enum

    class KVConnectorRole(enum.Enum):  # a plain Enum, as vLLM's: int(role) raises
        SCHEDULER = 0
        WORKER = 1

    class KVConnectorMetadata:
        pass

    class KVConnectorBase_V1:
        def __init__(self, vllm_config, role, kv_cache_config=None):
            self._connector_metadata = None
            self._vllm_config = vllm_config
            self._role = role
            self._kv_cache_config = kv_cache_config

        @property
        def role(self):
            return self._role

        def bind_connector_metadata(self, connector_metadata):
            self._connector_metadata = connector_metadata

        def clear_connector_metadata(self):
            self._connector_metadata = None

        def _get_connector_metadata(self):
            assert self._connector_metadata is not None
            return self._connector_metadata

        def has_connector_metadata(self):
            return self._connector_metadata is not None


logger = logging.getLogger("mooncake_go.vllm")

FINISHED_LENGTH_CAPPED = "FINISHED_LENGTH_CAPPED"


class MooncakeGoMetadata(KVConnectorMetadata):
    """One step's connector metadata: the bytes of mc_vllm_build_meta, and
    idle, true when the step schedules no tokens (the workers' get_finished
    then waits briefly for a transfer to complete, mc_vllm_wait_idle)."""

    def __init__(self, data=b"", idle=False):
        self.data = bytes(data)
        self.idle = bool(idle)


def _get(obj, path, default=None):
    for name in path.split("."):
        obj = getattr(obj, name, None)
        if obj is None:
            return default
    return obj


def _tp_rank(vllm_config):
    try:
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

        return int(get_tensor_model_parallel_rank())
    except Exception:  # no vLLM, or no process group (scheduler side)
        return int(_get(vllm_config, "parallel_config.rank", 0) or 0) % max(
            int(_get(vllm_config, "parallel_config.tensor_parallel_size", 1) or 1), 1
        )


def _pp_rank(vllm_config):
    try:
        from vllm.distributed.parallel_state import get_pp_group

        return int(get_pp_group().rank_in_group)
    except Exception:
        return int(_get(vllm_config, "parallel_config.pp_rank", 0) or 0)


def _host():
    env = os.environ.get("MOONCAKE_REQUESTER_LOCAL_HOSTNAME") or os.environ.get("VLLM_HOST_IP")
    if env:
        return env
    try:
        from vllm.utils import get_ip

        return get_ip()
    except Exception:
        return "127.0.0.1"


def _role_value(role):
    """vLLM's KVConnectorRole as the ABI's MC_VLLM_ROLE_* int: its value
    (vLLM's role is a plain enum.Enum, so int(role) raises); a bare int is
    taken as is."""
    v = getattr(role, "value", role)
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"KV connector role {role!r}: want KVConnectorRole.SCHEDULER or WORKER")
    return v


def _resolved_layout(kv_cache_config):
    """kv_cache_config.kv_cache_layout (vLLM >= 0.32: the physical order of
    the logical [L, B, H, N, C] KV cache, e.g. "LBHNC", resolved by the
    engine core and adopted by every worker), upper case, or None."""
    v = getattr(kv_cache_config, "kv_cache_layout", None)
    v = getattr(v, "name", v)
    if not v:
        return None
    v = str(v).upper()
    if sorted(v) != sorted("LBHNC"):
        return None
    return v


def _kv_layout(extra, use_mla, kv_cache_config=None):
    """The layout name in this instance's keys: mc_layout when given; else
    the layout vLLM resolved for this engine ("vllm-lbhnc"; MLA
    "vllm-mla-lbhnc"), which register_kv_caches checks against the
    tensors; else (older vLLM) its get_kv_cache_layout() ("vllm-nhd",
    "vllm-hnd"; MLA "vllm-mla")."""
    if extra.get("mc_layout"):
        return str(extra["mc_layout"])
    resolved = _resolved_layout(kv_cache_config)
    if resolved:
        return ("vllm-mla-" if use_mla else "vllm-") + resolved.lower()
    if use_mla:
        return "vllm-mla"
    layout = "NHD"
    try:
        from vllm.v1.attention.backends.utils import get_kv_cache_layout

        layout = get_kv_cache_layout() or "NHD"
    except Exception:
        pass
    return "vllm-" + str(layout).lower()


def _kv_dtype(vllm_config):
    d = _get(vllm_config, "cache_config.cache_dtype", "auto")
    if d in (None, "auto"):
        d = _get(vllm_config, "model_config.dtype", "auto")
    return str(d).replace("torch.", "")


def _num_layers(vllm_config, extra):
    if extra.get("mc_num_layers"):
        return int(extra["mc_num_layers"])
    mc = getattr(vllm_config, "model_config", None)
    try:
        return int(mc.get_num_layers(vllm_config.parallel_config))
    except Exception:
        return int(_get(mc, "hf_config.num_hidden_layers", 0) or 0)


def _block_size(vllm_config):
    bs = getattr(getattr(vllm_config, "cache_config", None), "block_size", None)
    return 16 if bs is None else int(bs)  # None: the platform default (16 on CUDA); 0 is refused by Go


# kv_connector_extra_config keys read by this connector, by the pool config
# loader, or by upstream's Mooncake connectors (accepted and ignored).
KNOWN_EXTRA_KEYS = frozenset(
    """mc_mode mc_layerwise mc_layout mc_num_layers mc_lookup_timeout_ms mc_load_timeout_ms mc_save_timeout_ms
    mc_pool_required mc_connect_timeout_ms mc_idle_wait_ms mc_save_async
    mc_tls_ca_file mc_tls_cert_file mc_tls_key_file mc_tls_server_name
    mc_etcd_tls_ca_file mc_etcd_tls_cert_file mc_etcd_tls_key_file
    load_async cache_prefix save_decode_cache bootstrap_server_address preferred_segment
    local_hostname metadata_server master_server_address master_server_addr global_segment_size
    local_buffer_size protocol device_name rdma_devices mode enable_offload tenant_id
    lookup_async lookup_rpc_port enable_lookup store_tp_size enable_store_tp_lcm prefill_tp_sizes
    enable_cross_layers_blocks num_workers mooncake_protocol""".split()
)


def settings_from(vllm_config, role, kv_cache_config=None):
    """The vllm.Settings JSON object for this process (see vllm.h)."""
    ktc = vllm_config.kv_transfer_config
    extra = dict(getattr(ktc, "kv_connector_extra_config", None) or {})
    use_mla = bool(_get(vllm_config, "model_config.use_mla", False))
    worker = role == KVConnectorRole.WORKER
    return {
        "kv_role": ktc.kv_role,
        "engine_id": str(getattr(ktc, "engine_id", "") or ""),
        "model": str(_get(vllm_config, "model_config.model", "")),
        "kv_dtype": _kv_dtype(vllm_config),
        "layout": _kv_layout(extra, use_mla, kv_cache_config),
        "block_size": _block_size(vllm_config),
        "tp_rank": _tp_rank(vllm_config) if worker else 0,
        "tp_size": int(_get(vllm_config, "parallel_config.tensor_parallel_size", 1) or 1),
        "pp_rank": _pp_rank(vllm_config) if worker else 0,
        "pp_size": int(_get(vllm_config, "parallel_config.pipeline_parallel_size", 1) or 1),
        "use_mla": use_mla,
        "host": _host(),
        "num_layers": _num_layers(vllm_config, extra),
        "kv_connector_extra_config": extra,
    }


def _params(request):
    p = getattr(request, "kv_transfer_params", None)
    return p if isinstance(p, dict) else None


def _status_name(request):
    st = getattr(request, "status", None)
    return getattr(st, "name", str(st))


# Tensor access for register_kv_caches: torch tensors and numpy arrays.
def _tensor_info(t):
    """(data address, shape, byte strides, total bytes, device name, CUDA
    ordinal or -1) of a tensor."""
    if hasattr(t, "data_ptr"):  # torch
        es = t.element_size()
        dev = t.device
        ordinal = -1
        if dev.type == "cuda":
            ordinal = dev.index if dev.index is not None else t.get_device()
        return t.data_ptr(), tuple(t.shape), tuple(s * es for s in t.stride()), t.numel() * es, str(dev), ordinal
    iface = t.__array_interface__  # numpy and friends
    return iface["data"][0], tuple(t.shape), tuple(t.strides), t.nbytes, "cpu", -1


class LayoutError(_abi.MooncakeError):
    """A KV cache tensor this connector cannot address block by block."""


def _dense_order(shape, strides, itemsize, nbytes):
    """The dims from slowest to fastest, if the tensor covers exactly nbytes
    of storage with no gaps or overlaps (any permutation of a contiguous
    tensor, such as vLLM's HND view), else None."""
    order = sorted(range(len(shape)), key=lambda i: strides[i], reverse=True)
    expect = itemsize
    for i in reversed(order):
        if shape[i] != 1 and strides[i] != expect:
            return None
        expect *= shape[i]
    return order if expect == nbytes else None


def regions_of(kv_caches, num_blocks=None):
    """The (base, block_bytes, num_blocks, layer, device_id) regions of vLLM's
    per-layer KV cache tensors, from their shapes and strides: one region
    for a blocks-first tensor ([num_blocks, ...]: FlashInfer, Triton, MLA),
    two for FlashAttention's [2, num_blocks, ...] (the K and V halves).
    Tensors sharing storage are taken once, in layer order. device_id is
    -1 for host memory, the CUDA ordinal for GPU memory (the library moves
    such blocks through pinned host staging). Raises
    LayoutError for a tensor that is not densely stored (a strided slice,
    Fortran order), whose blocks are not its slowest dimension, whose
    block count differs from num_blocks or the other layers', or whose
    layout is ambiguous (two blocks of shape [2, 2, ...]), or that lives
    on a device other than the CPU or a CUDA GPU."""
    regions, seen, count = [], set(), None
    for layer, (name, t) in enumerate(kv_caches.items()):
        try:
            ptr, shape, strides, nbytes, device, ordinal = _tensor_info(t)
            itemsize = t.element_size() if hasattr(t, "element_size") else t.itemsize
        except (AttributeError, TypeError, KeyError) as e:
            raise LayoutError(f"layer {name}: a {type(t).__name__} is not a tensor: {e}") from None
        if ordinal < 0 and not device.startswith("cpu"):
            raise LayoutError(f"layer {name}: KV cache on {device}: unsupported: KV caches on {device} (host memory and CUDA GPUs only)")
        if nbytes == 0 or not shape:
            raise LayoutError(f"layer {name}: empty KV cache tensor of shape {shape}")
        if (ptr, nbytes) in seen:
            continue
        seen.add((ptr, nbytes))
        order = _dense_order(shape, strides, itemsize, nbytes)
        if order is None:
            raise LayoutError(f"layer {name}: KV cache tensor of shape {shape}, strides {strides} is not densely stored")
        flash = len(shape) == 5 and shape[0] == 2 and (num_blocks is None or shape[1] == num_blocks)
        if flash and shape[1] == 2:
            raise LayoutError(f"layer {name}: shape {shape} is ambiguous ([2, num_blocks, ...] or [num_blocks, 2, ...] with 2 blocks)")
        block_dim = 1 if flash else 0
        nb = shape[block_dim]
        if num_blocks is not None and nb != num_blocks:
            raise LayoutError(f"layer {name}: {nb} blocks in shape {shape}, kv_cache_config says {num_blocks}")
        if count is not None and nb != count:
            raise LayoutError(f"layer {name}: {nb} blocks, the previous layers {count}")
        count = nb
        if order[: block_dim + 1] != list(range(block_dim + 1)):
            raise LayoutError(f"layer {name}: blocks are not the slowest dimension of shape {shape}, strides {strides}")
        block_bytes = strides[block_dim]
        if flash:
            regions.append((ptr, block_bytes, nb, layer, ordinal))
            regions.append((ptr + strides[0], block_bytes, nb, layer, ordinal))
        else:
            regions.append((ptr, block_bytes, nb, layer, ordinal))
    return regions


def _sync_cuda():
    """Waits for the CUDA work queued on the current stream (the forward's
    writes to the KV cache) before the library's copies read the blocks:
    they run on their own and do not order after vLLM's streams."""
    import torch  # only reached with GPU KV caches, where torch is loaded

    torch.cuda.current_stream().synchronize()


def check_layout(kv_caches, resolved):
    """Raises LayoutError unless every 4-D [B, H, N, C] KV cache tensor is
    stored in the physical order the resolved layout names (e.g. "LBHNC":
    blocks, then heads, then tokens, then content; L is the tensor itself),
    so the layout name in this instance's keys is the one its bytes have.
    Tensors of other ranks (older vLLM's [2, B, N, H, D]) are not checked;
    dims of size 1 are ignored."""
    want = [d for d in resolved if d != "L"]
    for name, t in kv_caches.items():
        try:
            _, shape, strides = _tensor_info(t)[:3]
        except (AttributeError, TypeError, KeyError):
            continue  # regions_of names it
        if len(shape) != 4:
            continue
        dims = [i for i in range(4) if shape[i] != 1]
        got = [ "BHNC"[i] for i in sorted(dims, key=lambda i: strides[i], reverse=True)]
        if got != [d for d in want if shape["BHNC".index(d)] != 1]:
            raise LayoutError(
                f"layer {name}: KV cache tensor of shape {shape}, strides {strides} is stored as "
                f"{''.join(got)}, but kv_cache_config.kv_cache_layout is {resolved}: its blocks would be "
                f"saved under the wrong layout name (set kv_connector_extra_config.mc_layout to name it)"
            )


def _safe(default):
    """Wraps a hot-path hook: a failure is logged and answered with default
    (a miss, no work, nothing finished) instead of raising into vLLM's
    engine threads; so is a call after shutdown."""

    def wrap(f):
        def hook(self, *args, **kwargs):
            if getattr(self, "_c", None) is None:
                logger.error("mooncake_go: %s after shutdown", f.__name__)
                return default() if callable(default) else default
            try:
                return f(self, *args, **kwargs)
            except _abi.MooncakeError as e:  # the pool or a peer failed: logged, no traceback
                logger.warning("mooncake_go: %s: %s", f.__name__, e)
            except Exception as e:  # a bug or odd engine input: never into the engine's threads
                logger.exception("mooncake_go: %s failed: %s", f.__name__, e)
            return default() if callable(default) else default

        hook.__name__, hook.__doc__ = f.__name__, f.__doc__
        return hook

    return wrap


class MooncakeGoConnector(KVConnectorBase_V1):
    """vLLM v1 KV connector backed by mooncake-go (store/offload mode and
    prefill/decode disaggregation; kv_connector_extra_config "mc_mode")."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config) if _accepts_cache_config() else super().__init__(vllm_config, role)
        self._kv_cache_config = kv_cache_config
        self._settings = settings_from(vllm_config, role, kv_cache_config)
        unknown = sorted(set(self._settings["kv_connector_extra_config"]) - KNOWN_EXTRA_KEYS)
        if unknown:
            logger.warning("mooncake_go: kv_connector_extra_config keys not used by MooncakeGoConnector: %s", ", ".join(unknown))
        self._mode = self._settings["kv_connector_extra_config"].get("mc_mode", "store")
        self._layerwise = bool(self._settings["kv_connector_extra_config"].get("mc_layerwise", False))
        self._layer_index = {}
        self._c = _abi.Connector(self._settings, _role_value(role))
        self._log_pool_error()
        self._is_worker = role == KVConnectorRole.WORKER
        self._lock = threading.Lock()
        # Scheduler side, by request id: the request, its blocks, its block
        # hashes as base64, and the full blocks already offered for saving.
        self._reqs = {}
        self._blocks = {}
        self._b64 = {}
        self._planned = {}
        # Requests whose blocks request_finished held (hold=True) until the
        # workers report them finished-sending (or finished-receiving);
        # requests with an asynchronous load or P/D receive planned and not
        # yet finished-receiving; lookups answered asynchronous, until
        # update_state_after_alloc.
        self._held = set()
        self._loading = set()
        self._async_hits = set()
        # Block ids of requests with a planned load (by request id), and of
        # recently finished ones with their hashes: vLLM names a failed
        # load's blocks by id, after the request may have finished.
        self._load_blocks = {}
        self._recent = collections.OrderedDict()
        # Worker side: failed block ids not yet reported.
        self._failed = set()

    # ---- scheduler side -------------------------------------------------

    def _hashes(self, request):
        """request.block_hashes as base64, encoded once per block: the list
        only grows (by full blocks) while the request lives."""
        hs = getattr(request, "block_hashes", None) or []
        enc = self._b64.setdefault(request.request_id, [])
        if len(enc) > len(hs):  # the engine rebuilt the list
            del enc[:]
        enc.extend(_abi.b64(h) for h in hs[len(enc):])
        return enc

    @_safe((0, False))
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        n, is_async = self._c.lookup({
            "req_id": request.request_id,
            "hashes": self._hashes(request),
            "num_tokens": int(request.num_tokens),
            "num_computed_tokens": int(num_computed_tokens),
            "params": _params(request),
        })
        is_async = bool(is_async and n > 0)
        if is_async:
            self._async_hits.add(request.request_id)
        else:
            self._async_hits.discard(request.request_id)
        return n, is_async

    @_safe(None)
    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        self._reqs[request.request_id] = request
        ids = list(blocks.get_block_ids()[0]) if blocks is not None else []
        unhashed = []
        if blocks is not None and hasattr(blocks, "get_unhashed_block_ids"):
            unhashed = list(blocks.get_unhashed_block_ids())
        params = _params(request)
        rid = request.request_id
        try:
            self._c.update_after_alloc({
                "req_id": rid,
                "block_ids": ids,
                "unhashed_block_ids": unhashed,
                "num_external_tokens": int(num_external_tokens),
                "params": params,
            })
            if int(num_external_tokens) > 0:
                self._load_blocks[rid] = ids  # to name the blocks of a failed load
                if rid in self._async_hits:
                    self._loading.add(rid)  # the workers report it in finished-receiving
        finally:
            self._async_hits.discard(rid)
            if self._mode == "pd" and params is not None and params.get("do_remote_prefill"):
                params["do_remote_prefill"] = False  # the receive is planned once, even if planning failed

    @_safe(MooncakeGoMetadata)
    def build_connector_meta(self, scheduler_output):
        preempted = set(getattr(scheduler_output, "preempted_req_ids", None) or ())
        for nr in getattr(scheduler_output, "scheduled_new_reqs", None) or ():
            self._blocks[nr.req_id] = list(nr.block_ids[0]) if nr.block_ids else []
            self._plan_save(nr.req_id, nr.num_computed_tokens, scheduler_output)
        cached = getattr(scheduler_output, "scheduled_cached_reqs", None)
        if cached is not None:
            resumed = getattr(cached, "resumed_req_ids", None)
            resumed_flags = getattr(cached, "resumed_from_preemption", None)
            for i, rid in enumerate(cached.req_ids):
                is_resumed = (resumed is not None and rid in resumed) or (resumed_flags is not None and resumed_flags[i])
                new = cached.new_block_ids[i] if cached.new_block_ids else None
                if is_resumed:
                    preempted.add(rid)
                    self._planned.pop(rid, None)  # its progress starts again
                    self._blocks[rid] = list(new[0]) if new else []
                elif new:
                    self._blocks.setdefault(rid, []).extend(new[0])
                self._plan_save(rid, cached.num_computed_tokens[i], scheduler_output)
        for rid in preempted:
            self._planned.pop(rid, None)
        if preempted:
            self._c.preempted(sorted(preempted))
        idle = int(getattr(scheduler_output, "total_num_scheduled_tokens", 1) or 0) == 0
        return MooncakeGoMetadata(self._c.build_meta(), idle=idle)

    def _plan_save(self, rid, num_computed, scheduler_output):
        """Asks Go to plan the saves of rid's blocks that this step fills;
        skipped (no call, no hash list sent) when the step fills no new
        block, as in most decode steps."""
        req = self._reqs.get(rid)
        if req is None:
            return
        done = int(num_computed) + int(scheduler_output.num_scheduled_tokens.get(rid, 0))
        hashes = self._hashes(req)
        full = min(len(hashes), done // self._settings["block_size"])
        if full <= self._planned.get(rid, 0):
            return
        self._planned[rid] = full
        try:
            self._c.plan_save({
                "req_id": rid,
                "hashes": hashes,
                "block_ids": self._blocks.get(rid, []),
                "num_computed_tokens": done,
                "num_prompt_tokens": int(getattr(req, "num_prompt_tokens", 0) or 0),
            })
        except _abi.MooncakeError as e:  # this request's saves only; the step goes on
            logger.warning("mooncake_go: planning saves of request %s: %s", rid, e)

    @_safe(None)
    def update_connector_output(self, connector_output):
        """Forgets held requests the workers finished sending, and loads
        the workers finished receiving (vLLM frees a finished request's
        blocks on either)."""
        for attr in ("finished_sending", "finished_recving"):
            done = getattr(connector_output, attr, None)
            if done:
                self._held.difference_update(done)
                if attr == "finished_recving":
                    self._loading.difference_update(done)
        invalid = getattr(connector_output, "invalid_block_ids", None)
        if invalid and self._c is not None:
            self._load_failed(set(invalid))

    def _load_failed(self, invalid):
        """Tells Go the hashes of the blocks whose load failed, so its
        lookups stop offering them for a while (a crashed storage node's
        blocks stay listed until the master drops the node)."""
        hashes = []
        for blocks, enc in [(b, self._b64.get(r) or []) for r, b in self._load_blocks.items()] + list(self._recent.values()):
            hashes.extend(enc[i] for i, b in enumerate(blocks) if b in invalid and i < len(enc))
        if hashes:
            try:
                self._c.load_failed(hashes)
            except _abi.MooncakeError as e:
                logger.warning("mooncake_go: noting failed loads: %s", e)

    def has_pending_push_work(self):
        """True while a finished request's blocks are held for a transfer
        (a P/D producer's push to its decode instance): vLLM keeps stepping
        its engine loop, so the workers report the send and the blocks are
        freed even when no new request arrives."""
        return bool(self._held)

    @_safe((False, None))
    def request_finished(self, request, block_ids):
        rid = request.request_id
        if rid in self._load_blocks:  # vLLM reports a failed load after this call
            self._recent[rid] = (self._load_blocks.pop(rid), self._b64.get(rid) or [])
            while len(self._recent) > 256:
                self._recent.popitem(last=False)
        for state in (self._reqs, self._blocks, self._b64, self._planned):
            state.pop(rid, None)
        self._async_hits.discard(rid)
        hold, params = self._c.request_finished({
            "req_id": rid,
            "block_ids": list(block_ids),
            "length_capped": _status_name(request) == FINISHED_LENGTH_CAPPED,
            "params": _params(request),
        })
        if rid in self._loading:
            # Finished (aborted, or failed by vLLM's kv_load_failure_policy)
            # while its asynchronous load or P/D receive may still write
            # into its blocks: vLLM must keep them until the workers list
            # the request in finished-receiving, which frees them. Not
            # holding would free blocks still being written, and vLLM
            # asserts on a finished-receiving id it no longer knows.
            hold = True
        if hold:
            self._held.add(rid)
        return hold, params

    def get_finished_count(self):
        return None

    def reset_cache(self):
        try:
            return self._c.reset() >= 0
        except _abi.MooncakeError as e:
            logger.error("mooncake_go: reset_cache: %s", e)
            return False

    # ---- worker side ----------------------------------------------------

    def register_kv_caches(self, kv_caches):
        """Registers vLLM's per-layer KV cache tensors (host or CUDA GPU
        memory; GPU caches need libcudart, else the call fails with
        "unsupported: no CUDA runtime"). A
        startup call: a tensor this connector cannot address, or one whose
        byte order differs from the layout in its keys, raises LayoutError
        so the engine stops with the reason instead of mixing layouts in
        the pool."""
        nb = getattr(self._kv_cache_config, "num_blocks", None)
        resolved = _resolved_layout(self._kv_cache_config)
        if resolved and not self._settings["kv_connector_extra_config"].get("mc_layout"):
            check_layout(kv_caches, resolved)
        self._layer_index = {name: i for i, name in enumerate(kv_caches)}
        regions = regions_of(kv_caches, nb)
        self._c.register_kv_caches(regions)
        self._on_gpu = any(r[4] >= 0 for r in regions)
        self._log_pool_error()

    def _log_pool_error(self):
        """Logs the pool config's remarks (a misspelled key in the
        MOONCAKE_CONFIG_PATH file...) and why the connector serves without
        its pool, if it does."""
        try:
            notes = self._c.take_notes()
            err = self._c.pool_error()
        except _abi.MooncakeError:
            return
        for n in notes:
            logger.warning("mooncake_go: %s", n)
        if err:
            logger.error("mooncake_go: serving without the KV cache pool (mc_pool_required is false): %s", err)

    @_safe(None)
    def handle_preemptions(self, arg):
        """Fences preempted requests before vLLM reuses their blocks. Older
        vLLM passes the set of request ids, newer the step's metadata (whose
        preempted list start_load_kv also fences)."""
        if isinstance(arg, MooncakeGoMetadata):
            ids = json.loads(arg.data or b"{}").get("preempted") or ()
        else:
            ids = arg if isinstance(arg, (set, list, tuple, frozenset)) else ()
        if ids:
            self._c.handle_preemptions(sorted(ids))

    @_safe(None)
    def start_load_kv(self, forward_context, **kwargs):
        meta = self._connector_metadata
        data = meta.data if isinstance(meta, MooncakeGoMetadata) else b""
        self._c.start_load(data)

    @_safe(None)
    def wait_for_layer_load(self, layer_name):
        """Layer-wise mode: waits for this layer of the step's synchronous
        loads. Otherwise whole blocks landed before start_load_kv returned
        (sync) or land across steps (async)."""
        if not self._layerwise:
            return None
        self._c.wait_layer_load(self._layer_index.get(layer_name, -1))  # on failure its blocks are reported failed

    @_safe(None)
    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        """Layer-wise mode: this layer's blocks of the step may be saved now.
        Otherwise whole blocks are saved after the forward (wait_for_save)."""
        if not self._layerwise:
            return None
        if getattr(self, "_on_gpu", False):
            _sync_cuda()  # the layer's kernels are queued, not done
        self._c.save_layer(self._layer_index.get(layer_name, -1))

    @_safe(None)
    def wait_for_save(self):
        """The forward is over: this step's saves start (in the
        background). With GPU KV caches the forward's CUDA work is waited
        for first, so the saves read the blocks it wrote."""
        if getattr(self, "_on_gpu", False):
            _sync_cuda()
        self._c.wait_for_save()

    @_safe((None, None))
    def get_finished(self, finished_req_ids):
        meta = self._connector_metadata
        if getattr(meta, "idle", False):
            # A step with nothing to compute (vLLM steps on while blocks
            # are held for saves or requests wait for async loads): wait
            # up to mc_idle_wait_ms for a completion instead of spinning.
            self._c.wait_idle()
        out, err = self._c.get_finished()
        if err is not None:
            logger.error("mooncake_go: get_finished: %s", err)
        for e in out.get("errors") or ():
            logger.warning("mooncake_go: KV transfer failed (failed loads are reported to vLLM): %s", e)
        with self._lock:
            self._failed.update(out.get("failed_blocks") or ())
        sending = set(out.get("sending") or ())
        recving = set(out.get("recving") or ())
        return (sending or None), (recving or None)

    @_safe(set)
    def get_block_ids_with_load_errors(self):
        with self._lock:
            failed, self._failed = self._failed, set()
        return failed

    def get_kv_connector_stats(self):
        """Worker side: a MooncakeGoKVConnectorStats of the counters since
        the previous call (vLLM calls it every step and aggregates the
        workers'), or None when nothing moved; the scheduler side has
        none."""
        if not self._is_worker or self._c is None:
            return None
        try:
            st = _stats.MooncakeGoKVConnectorStats(data=self._c.take_stats())
        except _abi.MooncakeError as e:
            logger.warning("mooncake_go: get_kv_connector_stats: %s", e)
            return None
        return None if st.is_empty() else st

    @classmethod
    def build_kv_connector_stats(cls, data=None):
        return _stats.MooncakeGoKVConnectorStats(data=data or {})

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        return _stats.MooncakeGoPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    def take_stats(self):
        """Worker counters since the previous call (saved/loaded/failed
        blocks and bytes), as a dict; the same counters vLLM receives
        through get_kv_connector_stats, which takes them too."""
        return self._c.take_stats()

    def shutdown(self):
        """Closes the connector (waits for its jobs, unmounts its segment);
        a failure is logged, never raised."""
        c, self._c = getattr(self, "_c", None), None
        if c is not None:
            try:
                c.close()
            except Exception as e:
                logger.error("mooncake_go: shutdown: %s", e)

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config):
        return None

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config):
        return False


def _accepts_cache_config():
    import inspect

    try:
        return "kv_cache_config" in inspect.signature(KVConnectorBase_V1.__init__).parameters
    except (TypeError, ValueError):
        return False
