"""A small stand-in for vLLM's v1 engine loop, driving a KV connector in
vLLM's call order (specs/vllm-kv-connector.md sections 3 and 4) on real
KV cache memory in vLLM's layouts (numpy arrays; the connector reads them
through their addresses as it would torch tensors).

What it models: a waiting queue and running list, block allocation from a
free list (block 0 reserved as vLLM's null block), chunked prefill under a
per-step token budget, block hashes chained over full blocks (sha256, as
vLLM's default), async loads parked in WAITING_FOR_REMOTE_KVS until a
worker reports them, the one-token back-off after a full-prompt load,
preemption (blocks freed, progress reset, resumed later), aborts, delayed
frees while saves run (request_finished -> finished_sending), and the
"recompute" load-failure policy. The forward writes, for every scheduled
token and layer, K and V bytes that depend only on the token prefix, the
layer and the TP rank: so any block loaded from the pool can be checked
against what this engine would have computed.
"""

import enum
import hashlib
import types

import numpy as np


class RequestStatus(enum.Enum):
    WAITING = 1
    WAITING_FOR_REMOTE_KVS = 2
    RUNNING = 3
    PREEMPTED = 4
    FINISHED_STOPPED = 5
    FINISHED_LENGTH_CAPPED = 6
    FINISHED_ABORTED = 7


NONE_HASH = hashlib.sha256(b"mooncake-go vllm harness").digest()


class Request:
    def __init__(self, rid, prompt, max_tokens, block_size, kv_transfer_params=None):
        self.request_id = rid
        self.prompt_token_ids = list(prompt)
        self.all_token_ids = list(prompt)
        self.num_prompt_tokens = len(prompt)
        self.num_computed_tokens = 0
        self.max_tokens = max_tokens
        self.kv_transfer_params = kv_transfer_params
        self.status = RequestStatus.WAITING
        self.block_size = block_size
        self.block_hashes = []
        self.output = []
        self._rehash()

    @property
    def num_tokens(self):
        return len(self.all_token_ids)

    def _rehash(self):
        bs = self.block_size
        while (len(self.block_hashes) + 1) * bs <= len(self.all_token_ids):
            i = len(self.block_hashes)
            prev = self.block_hashes[-1] if self.block_hashes else NONE_HASH
            chunk = self.all_token_ids[i * bs:(i + 1) * bs]
            self.block_hashes.append(hashlib.sha256(prev + np.asarray(chunk, dtype=np.int64).tobytes()).digest())

    def append_token(self, tok):
        self.all_token_ids.append(tok)
        self.output.append(tok)
        self._rehash()


class Blocks:
    def __init__(self, ids, unhashed):
        self._ids, self._unhashed = list(ids), list(unhashed)

    def get_block_ids(self):
        return (list(self._ids),)

    def get_unhashed_block_ids(self):
        return list(self._unhashed)


class Layout:
    """A KV cache layout: tensor shape per layer and how a token slot maps
    to K and V bytes."""

    def __init__(self, kind, num_blocks, block_size, heads, head_dim, dtype=np.float16):
        self.kind, self.nb, self.bs, self.h, self.d, self.dtype = kind, num_blocks, block_size, heads, head_dim, dtype

    def new_tensor(self):
        nb, bs, h, d = self.nb, self.bs, self.h, self.d
        if self.kind == "flash_attn":  # [2, num_blocks, block_size, heads, head_dim]
            return np.zeros((2, nb, bs, h, d), self.dtype)
        if self.kind == "flashinfer":  # [num_blocks, 2, block_size, heads, head_dim]
            return np.zeros((nb, 2, bs, h, d), self.dtype)
        if self.kind == "mla":  # [num_blocks, block_size, head_dim]
            return np.zeros((nb, bs, h * d), self.dtype)
        raise ValueError(self.kind)

    def views(self, t, block, off):
        """The K and V slot views of one token (MLA: one slot)."""
        if self.kind == "flash_attn":
            return [t[0, block, off], t[1, block, off]]
        if self.kind == "flashinfer":
            return [t[block, 0, off], t[block, 1, off]]
        return [t[block, off]]

    def slot_values(self, prefix_hash, layer, rank):
        n = self.h * self.d
        out = []
        parts = 1 if self.kind == "mla" else 2
        for kv in range(parts):
            seed = hashlib.blake2b(prefix_hash + bytes([layer, kv, rank if self.kind != "mla" else 0]), digest_size=8).digest()
            rng = np.random.default_rng(int.from_bytes(seed, "little"))
            shape = (n,) if self.kind == "mla" else (self.h, self.d)
            out.append(rng.standard_normal(n).astype(self.dtype).reshape(shape))
        return out


def token_prefix_hashes(tokens):
    """hash of tokens[:p+1] for every position p (the KV of a token depends
    on its whole prefix)."""
    out, h = [], b""
    for t in tokens:
        h = hashlib.blake2b(h + int(t).to_bytes(8, "little", signed=True), digest_size=16).digest()
        out.append(h)
    return out


class Worker:
    """One TP rank: its connector and its per-layer KV caches."""

    def __init__(self, conn, layout, layers, rank):
        self.conn, self.layout, self.rank = conn, layout, rank
        self.caches = {f"model.layers.{i}.self_attn.attn": layout.new_tensor() for i in range(layers)}
        conn.register_kv_caches(self.caches)

    def write(self, req, pos, block, layer):
        """The forward's K/V of token pos in one layer."""
        ph = token_prefix_hashes(req.all_token_ids[: pos + 1])[-1]
        t = list(self.caches.values())[layer]
        for view, val in zip(self.layout.views(t, block, pos % self.layout.bs), self.layout.slot_values(ph, layer, self.rank)):
            view[...] = val

    def check(self, req, pos, block):
        """Whether the slot of token pos in block holds this engine's KV."""
        ph = token_prefix_hashes(req.all_token_ids[: pos + 1])[-1]
        for li, t in enumerate(self.caches.values()):
            for view, val in zip(self.layout.views(t, block, pos % self.layout.bs), self.layout.slot_values(ph, li, self.rank)):
                if not np.array_equal(view, val):
                    return False
        return True


class Engine:
    """The engine loop. sched: the scheduler-role connector; workers: one
    worker-role connector per TP rank."""

    def __init__(self, sched, worker_conns, layout, layers, token_budget=64, policy="recompute", old_preempt_api=False):
        self.sched, self.layout, self.budget, self.policy = sched, layout, token_budget, policy
        self.workers = [Worker(c, layout, layers, r) for r, c in enumerate(worker_conns)]
        self.free = list(range(1, layout.nb))  # block 0 is the null block
        self.waiting, self.running = [], []
        self.blocks = {}  # req id -> block ids
        self.finished_ids = set()  # finished since the previous step
        self.held = {}  # finished request id -> blocks held for saves
        self.ready = set()  # async loads reported done
        self.loading = {}  # req id -> (first external token, tokens) of an async load
        self.sync_loaded = {}  # req id -> (first, n) loaded this step
        self.failed_blocks = set()
        self.log = []  # (event, req id, ...)
        self.done = {}  # req id -> Request
        self.old_preempt_api = old_preempt_api
        self.recv_counts = {}
        self.send_counts = {}

    # -- requests ---------------------------------------------------------
    def add(self, req):
        self.waiting.append(req)

    def abort(self, rid):
        for q in (self.waiting, self.running):
            for r in q:
                if r.request_id == rid:
                    q.remove(r)
                    loading = r.status == RequestStatus.WAITING_FOR_REMOTE_KVS and rid not in self.ready
                    r.status = RequestStatus.FINISHED_ABORTED
                    self._finish(r, loading)
                    return r
        raise KeyError(rid)

    def _alloc(self, n):
        if n > len(self.free):
            return None
        out, self.free = self.free[:n], self.free[n:]
        return out

    def _finish(self, req, loading=False):
        """request_finished, then free the blocks or hold them: while the
        connector still saves them (hold) or an async load may still write
        them (loading: vLLM frees those once the load is reported)."""
        blocks = self.blocks.pop(req.request_id, [])
        hold, params = self.sched.request_finished(req, blocks)
        req.finish_params = params
        self.finished_ids.add(req.request_id)
        self.loading.pop(req.request_id, None)
        self.log.append(("finished", req.request_id, req.status.name, hold))
        self.ready.discard(req.request_id)
        if hold or loading:  # held: freed once reported finished-sending or finished-receiving
            self.held[req.request_id] = blocks
        else:
            self.free.extend(blocks)
        self.done[req.request_id] = req

    def preempt(self, rid):
        """Preempts a running request, as vLLM does when blocks run out."""
        req = next(r for r in self.running if r.request_id == rid)
        self.running.remove(req)
        self.free.extend(self.blocks.pop(rid))
        req.status = RequestStatus.PREEMPTED
        req.num_computed_tokens = 0
        req.resumed = True
        self.waiting.insert(0, req)
        self.preempted_now.add(rid)
        self.log.append(("preempted", rid))

    # -- one engine step --------------------------------------------------
    def step(self, before_build=None):
        self.preempted_now = getattr(self, "preempted_pending", set())
        self.preempted_pending = set()
        bs = self.layout.bs
        budget = self.budget
        new_reqs, cached = [], types.SimpleNamespace(req_ids=[], new_block_ids=[], num_computed_tokens=[], resumed_req_ids=set())
        num_sched = {}
        # Running requests first (decode or the next prefill chunk).
        for req in list(self.running):
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            if n <= 0:
                continue
            have = len(self.blocks[req.request_id])
            need = -(-(req.num_computed_tokens + n) // bs) - have
            nb = self._alloc(need) if need > 0 else []
            if nb is None:
                continue
            self.blocks[req.request_id] += nb
            budget -= n
            num_sched[req.request_id] = n
            cached.req_ids.append(req.request_id)
            cached.new_block_ids.append((nb,) if nb else None)
            cached.num_computed_tokens.append(req.num_computed_tokens)
        # Waiting requests.
        for req in list(self.waiting):
            if budget <= 0:
                break
            rid = req.request_id
            if req.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                if rid not in self.ready:
                    continue
                self.ready.discard(rid)
                first, n_ext = self.loading.pop(rid)
                req.num_computed_tokens = first + n_ext
                if req.num_computed_tokens >= req.num_tokens:  # full hit: recompute the last token
                    req.num_computed_tokens = req.num_tokens - 1
                self._check_loaded(req, first, n_ext)
                req.status = RequestStatus.WAITING
                n = min(req.num_tokens - req.num_computed_tokens, budget)
                need = -(-(req.num_computed_tokens + n) // bs) - len(self.blocks[rid])
                more = self._alloc(need) if need > 0 else []
                if more is None:
                    self.ready.add(rid)
                    self.loading[rid] = (first, n_ext)
                    req.status = RequestStatus.WAITING_FOR_REMOTE_KVS
                    break
                self.blocks[rid] += more
                self.waiting.remove(req)
                self.running.append(req)
                budget -= n
                num_sched[rid] = n
                new_reqs.append(self._new_req(req))
                continue
            local = 0
            n_ext, is_async = self.sched.get_num_new_matched_tokens(req, local)
            assert n_ext is not None
            assert n_ext == 0 or is_async or local + n_ext < req.num_tokens, "sync load claimed every token"
            n = 0 if is_async else min(req.num_tokens - local - n_ext, budget)
            total = -(-(local + n_ext + n) // bs)
            ids = self._alloc(total)
            if ids is None:
                break
            self.blocks[rid] = ids
            self.sched.update_state_after_alloc(req, Blocks(ids, ids), n_ext)
            self.log.append(("alloc", rid, n_ext, is_async))
            resumed = getattr(req, "resumed", False)
            req.resumed = False
            if is_async:
                req.status = RequestStatus.WAITING_FOR_REMOTE_KVS
                self.loading[rid] = (local, n_ext)
                continue
            self.waiting.remove(req)
            self.running.append(req)
            req.status = RequestStatus.RUNNING
            req.num_computed_tokens = local + n_ext
            if n_ext:
                self.sync_loaded[rid] = (local, n_ext)
            budget -= n
            num_sched[rid] = n
            if resumed:  # vLLM lists a resumed request among the cached ones
                cached.req_ids.append(rid)
                cached.new_block_ids.append((list(ids),))
                cached.num_computed_tokens.append(req.num_computed_tokens)
                cached.resumed_req_ids.add(rid)
            else:
                new_reqs.append(self._new_req(req))
        out = types.SimpleNamespace(
            scheduled_new_reqs=new_reqs,
            scheduled_cached_reqs=cached,
            num_scheduled_tokens=num_sched,
            finished_req_ids=set(self.finished_ids),
            preempted_req_ids=None if self.old_preempt_api else set(self.preempted_now),
        )
        if before_build:
            before_build(self)
        meta = self.sched.build_connector_meta(out)
        finished = set(self.finished_ids)
        self.finished_ids.clear()

        # Workers.
        sending, recving, failed = [], [], set()
        for w in self.workers:
            c = w.conn
            if self.preempted_now:
                c.handle_preemptions(set(self.preempted_now))
            c.bind_connector_metadata(meta)
            c.start_load_kv(None)
            if num_sched:
                # the forward, layer by layer as vLLM's attention layers run:
                # wait for the layer's KV, write this step's K/V, offer it to save
                for layer, (name, t) in enumerate(w.caches.items()):
                    c.wait_for_layer_load(name)
                    for rid, n in num_sched.items():
                        req = self._req(rid)
                        for pos in range(req.num_computed_tokens, req.num_computed_tokens + n):
                            w.write(req, pos, self.blocks[rid][pos // self.layout.bs], layer)
                    c.save_kv_layer(name, t, None)
                c.wait_for_save()
            s, r = c.get_finished(finished)
            failed |= set(c.get_block_ids_with_load_errors())
            sending.append(s or set())
            recving.append(r or set())
            c.clear_connector_metadata()
        # Aggregate: an id counts once every worker reported it.
        for rid in set().union(*sending):
            self.send_counts[rid] = self.send_counts.get(rid, 0) + sum(rid in s for s in sending)
        for rid in set().union(*recving):
            self.recv_counts[rid] = self.recv_counts.get(rid, 0) + sum(rid in r for r in recving)
        fin_send = {r for r, n in self.send_counts.items() if n == len(self.workers)}
        fin_recv = {r for r, n in self.recv_counts.items() if n == len(self.workers)}
        for r in fin_send:
            del self.send_counts[r]
        for r in fin_recv:
            del self.recv_counts[r]
        self._update_from_output(num_sched, fin_send, fin_recv, failed)
        return out

    def _new_req(self, req):
        return types.SimpleNamespace(
            req_id=req.request_id,
            prompt_token_ids=req.prompt_token_ids,
            block_ids=(list(self.blocks[req.request_id]),),
            num_computed_tokens=req.num_computed_tokens,
        )

    def _req(self, rid):
        for r in self.running:
            if r.request_id == rid:
                return r
        raise KeyError(rid)

    def _check_loaded(self, req, first, n):
        """Every loaded token's KV equals what this engine computes, on
        every TP rank - except tokens of blocks reported failed (they are
        recomputed)."""
        bs = self.layout.bs
        for w in self.workers:
            for pos in range(first, first + n):
                b = self.blocks[req.request_id][pos // bs]
                if b in self.failed_blocks:
                    continue
                assert w.check(req, pos, b), f"{req.request_id}: rank {w.rank} token {pos} (block {b}) holds wrong KV after the load"
        self.log.append(("verified-load", req.request_id, first, n))

    def _update_from_output(self, num_sched, fin_send, fin_recv, failed):
        bs = self.layout.bs
        self.failed_blocks |= failed
        # Invalid blocks first (recompute policy): cut progress back.
        for req in self.running + self.waiting:
            ids = self.blocks.get(req.request_id, [])
            bad = [i for i, b in enumerate(ids) if b in failed]
            if not bad:
                continue
            self.log.append(("load-error", req.request_id, bad[0]))
            assert self.policy == "recompute"
            if req.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                first, n = self.loading[req.request_id]
                self.loading[req.request_id] = (first, min(n, bad[0] * bs - first))
            else:
                req.num_computed_tokens = min(req.num_computed_tokens, bad[0] * bs)
                num_sched.pop(req.request_id, None)
        # Sync loads: verify now (the forward ran on them).
        for rid, (first, n) in list(self.sync_loaded.items()):
            del self.sync_loaded[rid]
            req = next((r for r in self.running if r.request_id == rid), None)
            if req is not None:
                self._check_loaded(req, first, min(n, req.num_computed_tokens - first))
        # vLLM's _update_from_kv_xfer_finished: the scheduler connector sees
        # the step's finished transfers first, then the blocks are freed.
        self.sched.update_connector_output(types.SimpleNamespace(
            finished_sending=set(fin_send), finished_recving=set(fin_recv), invalid_block_ids=set(failed)))
        for rid in fin_recv:
            # vLLM 0.32 asserts the request still exists: a finished request
            # must have been held (request_finished -> True) to be reported.
            assert not (rid in self.done and rid not in self.held), f"finished-receiving for {rid}, which vLLM already freed"
            if rid in self.held and rid in self.done:  # aborted while loading
                self.free.extend(self.held.pop(rid))
                self.log.append(("recv-after-finish", rid))
                continue
            self.ready.add(rid)
            self.log.append(("recv", rid))
        for rid in fin_send:
            assert rid in self.held, f"finished-sending for {rid}, which is not held"
            blocks = self.held.pop(rid)
            self.free.extend(blocks)
            self.log.append(("sent", rid))
        for rid, n in num_sched.items():
            req = self._req(rid)
            req.num_computed_tokens += n
            if req.num_computed_tokens >= req.num_tokens:  # sampled a token
                req.append_token(1000 + len(req.output))
                if len(req.output) >= req.max_tokens:
                    self.running.remove(req)
                    req.status = RequestStatus.FINISHED_LENGTH_CAPPED
                    self._verify_all(req)
                    self._finish(req)

    def _verify_all(self, req):
        """At the end, every token of the request with KV in its blocks
        holds this engine's KV (computed or loaded)."""
        bs = self.layout.bs
        for w in self.workers:
            for pos in range(req.num_tokens - 1):
                b = self.blocks[req.request_id][pos // bs]
                assert w.check(req, pos, b), f"{req.request_id}: rank {w.rank} token {pos} holds wrong KV at the end"

    def idle(self):
        return not (self.waiting or self.running or self.held or self.loading)

    def run(self, timeout=60.0):
        """Steps until nothing is waiting, running or held (a deadline, not
        a step count: saves and async loads finish on Go threads)."""
        import time

        deadline = time.monotonic() + timeout
        while not self.idle():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"engine did not drain in {timeout} s: waiting {[r.request_id for r in self.waiting]}, "
                    f"running {[r.request_id for r in self.running]}, held {list(self.held)}, loading {list(self.loading)}"
                )
            self.step()
