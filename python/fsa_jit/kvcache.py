"""kvcache_attention: selected attention of new query tokens over a paged KV cache.

For inference servers: decode (one new token per sequence), speculative
decoding (a few) and chunked prefill (many) in one call per layer, with the
caches held in pages addressed through a page table (FlashAttention's
``flash_attn_with_kvcache`` and vLLM conventions)::

    from fsa_jit.kvcache import kvcache_attention
    o, lse = kvcache_attention(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table,
                               topk_idx, block_size=64, return_lse=True)

Semantics (libfsa's ``fsa_kvcache_attention``): sequence b has
``q_len_b = cu_seqlens_q[b+1] - cu_seqlens_q[b]`` new tokens and ``seqused_k[b]``
cached keys, new tokens included; its new token i sits at position
``p = seqused_k[b] - q_len_b + i`` and sees key j of a valid selected block with
``j <= p``. A slot is valid when it is below the token's ``topk_length`` (if
given), ``0 <= idx <= p // block_size``, and no earlier slot of the row holds the
same block. No visible key: o = 0, lse = -inf. Forward only: with q or a cache
requiring grad, o's backward raises (torch's error for an operator without one).

The call does no host synchronisation and allocates only through torch's
caching allocator, except with validate=True (it waits for the check's
verdict) and with tuning on (FSA_TUNE=on or force): then each plan's first
call that is not being captured measures its split counts on scratch batches
that libfsa allocates with cuMemAlloc, outside torch's allocator, and frees,
waiting for the timings (host synchronizations; kvcache_plan_choice's
will_measure). After a first eager call (which creates the plan), it can
be captured in a CUDA graph, with ``block_table``, ``seqused_k``, ``topk_idx`` and
``topk_length`` updated in place between replays. Plans are cached per shape,
scale, splits, validate and plan sizes; without max_batch and max_query_tokens
the sizes are the call's batch and token count rounded up to a power of two
(at most INT32_MAX; max_batch at most MAX_BATCH, INT32_MAX - 1024),
so a captured call whose sizes round otherwise than every earlier call's
would need its plan made inside the capture (compiling or loading kernels),
which raises RuntimeError instead. Warm up every size to be captured, or pass
max_batch and max_query_tokens. Under ``torch.compile``, fake
tensors or a dispatch mode the call is the operator
``torch.ops.fsa_jit.kvcache_attention`` (with a fake implementation); a plain
eager call skips the dispatcher. kvcache_attention checks its arguments
(check_arguments), then passes scale 0.0 for the default and 0 for the plan's
sizes; the operator and its fake implementation run the same checks on that
encoding, so a direct call gets the same errors. Metadata only: the values of
the lengths, page table and selections are checked by validate=True.
"""

import ctypes
import threading
from typing import Optional

import torch

from . import _lib, _nsa_abi
from . import attention as _att
from ._fast import _modes_active
from ._kvcache_abi import SIGNATURES as _SIGNATURES
from ._kvcache_abi import fsa_kvcache_args, fsa_kvcache_desc

_DTYPES = {torch.bfloat16: _lib.FSA_DTYPE_BF16, torch.float16: _lib.FSA_DTYPE_F16}

_tensor = _lib.fsa_tensor

_lock = threading.Lock()
_plans = {}  # (plan shape, tuning mode) -> (fsa_kvcache_plan *, workspace bytes); contexts: attention._context


def _fn(lib, name):
    """libfsa's paged-cache function `name`, its signature declared once (on the library object)."""
    return _nsa_abi.function(lib, name, _SIGNATURES)


# The most sequences a paged-cache plan takes (libfsa's FSA_KVC_MAX_BATCH: its kernels walk a batch with an
# int counter stepping by up to 1024 threads).
MAX_BATCH = _lib.INT32_MAX - 1024


def _pow2_at_least(n, cap=_lib.INT32_MAX):
    """The plan size a call of n takes by default: the next power of two, at most cap (INT32_MAX, what the
    plan's int fields hold, or MAX_BATCH for max_batch; n itself is at most that)."""
    p = 1
    while p < n:
        p *= 2
    return min(p, cap)


def _plan(lib, shape):
    """(handle, workspace bytes, counter bytes) of the plan of `shape` under the tuning mode set now (set_tuning)."""
    tune = _att._tune
    key = shape + (tune,)
    plan = _plans.get(key)
    if plan is not None:
        return plan
    with _lock:
        plan = _plans.get(key)
        if plan is None:
            device, dtype, d, hq, hkv, bk, k, page, max_batch, max_tokens, scale, splits, validate, dv = shape
            _att.refuse_plan_in_capture(device, "kvcache_attention")
            desc = fsa_kvcache_desc(dtype=_DTYPES[dtype], head_dim=d, num_q_heads=hq, num_kv_heads=hkv,
                                    block_size=bk, top_k=k, page_size=page, max_batch=max_batch,
                                    max_query_tokens=max_tokens, scale=scale, splits=splits,
                                    value_dim=0 if dv == d else dv)
            handle = ctypes.c_void_p()
            lib.check(_fn(lib, "fsa_kvcache_plan_create")(ctypes.byref(handle),
                                                          _att._context(lib, device, validate, tune),
                                                          ctypes.byref(desc)), "fsa_kvcache_plan_create")
            try:
                size, counters = ctypes.c_size_t(0), ctypes.c_size_t(0)
                lib.check(_fn(lib, "fsa_kvcache_plan_workspace_size")(ctypes.byref(size), handle.value),
                          "fsa_kvcache_plan_workspace_size")
                try:
                    counter_size = _fn(lib, "fsa_kvcache_plan_workspace_counter_size")
                except RuntimeError:  # a libfsa before it: the whole workspace is zeroed per call
                    counters.value = size.value
                else:
                    lib.check(counter_size(ctypes.byref(counters), handle.value),
                              "fsa_kvcache_plan_workspace_counter_size")
            except BaseException:
                _fn(lib, "fsa_kvcache_plan_destroy")(handle.value)  # made but not kept: not leaked
                raise
            plan = _plans[key] = (handle.value, size.value, counters.value)
    return plan


def kvcache_plan_choice(*, dtype, head_dim, num_q_heads, num_kv_heads, block_size, top_k=16, page_size=64,
                        max_batch, max_query_tokens, scale=None, splits=0, value_dim=None, device=0):
    """The split count the paged-cache plan of this shape takes (the plan is made if needed), and why.

    Returns a dict: splits (shares of a one-tile sequence), variant (e.g. "kvc.s4"), source ("forced",
    "only_one", "heuristic" or "measured": the plan's tuning record), reason, candidates and will_measure
    (the next call measures: tuning on through FSA_TUNE, no record yet). Never measures.
    """
    # As kvcache_attention takes them; the ints within the descriptor's int32 fields.
    if not isinstance(dtype, torch.dtype) or dtype not in _DTYPES:
        raise TypeError(f"dtype must be torch.bfloat16 or torch.float16, got {dtype!r}")
    for name, value in (("head_dim", head_dim), ("num_q_heads", num_q_heads), ("num_kv_heads", num_kv_heads),
                        ("block_size", block_size), ("top_k", top_k), ("page_size", page_size),
                        ("max_batch", max_batch), ("max_query_tokens", max_query_tokens)):
        _lib.require_int(name, value, 1)
    if value_dim is not None:  # an int; 0 is head_dim, as in the descriptor
        _lib.require_int("value_dim", value_dim, 0)
    _lib.require_int("splits", splits, 0)
    _lib.require_int("device", device, 0)
    _lib.require_scale(scale)
    lib = _lib.get()
    key = (device, dtype, int(head_dim), int(num_q_heads), int(num_kv_heads), int(block_size), int(top_k),
           int(page_size), int(max_batch), int(max_query_tokens), float(scale or 0.0), int(splits), False,
           int(value_dim or head_dim))
    handle = _plan(lib, key)[0]
    c = _lib.fsa_plan_choice()
    lib.check(_fn(lib, "fsa_kvcache_plan_choice_get")(ctypes.byref(c), handle), "fsa_kvcache_plan_choice_get")
    return {
        "splits": c.splits,
        "variant": _lib._text(c.variant),
        "source": _lib.CHOICE_SOURCES[c.source],
        "reason": _lib._text(c.reason),
        "candidates": c.candidates,
        "will_measure": bool(c.will_measure),
    }


def clear_plans():
    """Destroys the cached paged-cache plans (a captured graph that used one must not replay)."""
    lib = _lib._library
    with _lock:
        plans = list(_plans.values())
        _plans.clear()
        if lib is not None:
            for plan in plans:  # (handle, workspace bytes, counter bytes)
                _fn(lib, "fsa_kvcache_plan_destroy")(plan[0])


def _require(cond, message):
    if not cond:
        raise ValueError(message)


def _plan_int(name, value, low):
    """_lib.require_int, with a plain int in range taking the cheap test only (every serving call checks)."""
    if type(value) is not int or not low <= value <= _lib.INT32_MAX:
        _lib.require_int(name, value, low)


def _require_cuda(q, k_cache, v_cache):
    """The one check that needs CUDA tensors (the CPU tests replace it)."""
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        _require(t.is_cuda, f"{name} must be a CUDA tensor")


def _stream(device):
    """The current stream's handle on `device` (the CPU tests replace it)."""
    return torch.cuda.current_stream(device).cuda_stream


def _device_index(device):
    """The CUDA ordinal of `device` (the CPU tests replace it)."""
    return device.index if device.index is not None else torch.cuda.current_device()


def check_arguments(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, topk_idx, block_size,
                    topk_length=None, topk_layout="thk", scale=None, max_batch=None, max_query_tokens=None,
                    splits=0):
    """Checks kvcache_attention's arguments (TypeError, ValueError): metadata only, never a value, so no host
    synchronization. The operator runs them too, on its encoding (scale 0.0, max_batch and max_query_tokens 0
    for the defaults)."""
    # Shapes first, devices last: everything but CUDA itself can be checked on a CPU-only machine. Messages
    # are built only on failure: this runs on every serving call.
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("cu_seqlens_q", cu_seqlens_q),
                    ("seqused_k", seqused_k), ("block_table", block_table), ("topk_idx", topk_idx),
                    ("topk_length", topk_length)):
        if not isinstance(t, torch.Tensor) and not (t is None and name == "topk_length"):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t is not None:
            _att._check_dense(name, t)
    if q.dtype not in _DTYPES:
        raise TypeError(f"q must be torch.bfloat16 or torch.float16, got {q.dtype}")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name} must have q's dtype {q.dtype}, got {t.dtype}")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}: all tensors must be on one device")
    if not (q.dim() == 3 and k_cache.dim() == 4 and v_cache.dim() == 4 and v_cache.shape[:3] == k_cache.shape[:3]):
        raise ValueError("q must be [Tq, Hq, D], k_cache [num_pages, page_size, Hkv, D] and v_cache [num_pages, "
                         f"page_size, Hkv, Dv] with the same pages and heads; got {tuple(k_cache.shape)} and "
                         f"{tuple(v_cache.shape)}")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name}'s last dimension must be contiguous")
    tq, hq, d = q.shape
    hkv, dk, dv = k_cache.shape[2], k_cache.shape[3], v_cache.shape[3]
    if dk != d:
        raise ValueError(f"q and k_cache share the query/key head dim: q has {d}, k_cache {dk}")
    if hq < 1 or hkv < 1:
        raise ValueError(f"need at least one head: q has {hq}, k_cache and v_cache {hkv}")
    if hq % hkv:
        raise ValueError(f"Hq {hq} is not a multiple of Hkv {hkv}")
    if d % 16 or not 16 <= d <= 256:
        raise ValueError(f"q's head dim {d}: a multiple of 16 from 16 to 256")
    if dv % 16 or not 16 <= dv <= 256:
        raise ValueError(f"v_cache's head dim {dv}: a multiple of 16 from 16 to 256")
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("seqused_k", seqused_k), ("block_table", block_table),
                    ("topk_idx", topk_idx), ("topk_length", topk_length)):
        if t is None:
            continue
        if t.dtype != torch.int32:
            raise TypeError(f"{name} must be torch.int32, got {t.dtype}")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}: all tensors must be on one device")
    # Batch 0 is an empty call ([0]: no sequence, no query token); libfsa refuses query tokens without one.
    if cu_seqlens_q.dim() != 1 or cu_seqlens_q.numel() < 1:
        raise ValueError(f"cu_seqlens_q must be 1-D [B + 1], got shape {tuple(cu_seqlens_q.shape)}")
    batch = cu_seqlens_q.numel() - 1
    if batch == 0 and tq:
        raise ValueError(f"cu_seqlens_q describes no sequence (B = 0) but q has {tq} tokens")
    if not (seqused_k.dim() == 1 and seqused_k.numel() == batch):
        raise ValueError(f"seqused_k must be [B] = [{batch}] (B from cu_seqlens_q), got shape {tuple(seqused_k.shape)}")
    if not (block_table.dim() == 2 and block_table.shape[0] == batch):
        raise ValueError(f"block_table must be [B, max_pages] with B = {batch} (from cu_seqlens_q), got shape "
                         f"{tuple(block_table.shape)}")
    if not (block_table.shape[1] <= 1 or block_table.stride(1) == 1):
        raise ValueError("block_table's pages must be contiguous in a row (column stride 1), got stride "
                         f"{block_table.stride(1)}")
    # fsa_kvcache_args.batch and .max_pages_per_seq are ints: ctypes would keep the low 32 bits silently.
    if batch > MAX_BATCH:
        raise ValueError(f"cu_seqlens_q describes {batch} sequences: at most {MAX_BATCH} (libfsa's paged-cache "
                         "plans)")
    # So are the plan's page size and head counts (2**32 + 16 would become 16; Hkv divides Hq, so Hq's check
    # covers it), its query tokens, and its top-k (below).
    for name, value in (("k_cache's page size", k_cache.shape[1]), ("q's head count", hq), ("q's token count", tq)):
        if value > _lib.INT32_MAX:
            raise ValueError(f"{name} {value} is past int32: at most {_lib.INT32_MAX} (libfsa's plan)")
    if block_table.shape[1] > _lib.INT32_MAX:
        raise ValueError(f"block_table has {block_table.shape[1]} pages per sequence: at most {_lib.INT32_MAX} "
                         "(libfsa's int max_pages_per_seq)")
    # Read in place by pointer (never copied: callers update them in place between CUDA graph replays).
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("seqused_k", seqused_k)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (it is read in place, not copied)")
    if tq:  # as libfsa: an empty call reads nothing
        _check_in_place_strides(q, k_cache, v_cache, block_table, batch)
    if topk_idx.dim() not in (2, 3):
        raise ValueError(f"topk_idx must be [Tq, Hkv, K], [Hkv, Tq, K] or [Tq, K], got shape {tuple(topk_idx.shape)}")
    _require(topk_idx.shape[-1] <= 1 or topk_idx.stride(-1) == 1, "topk_idx's last dimension must be contiguous")
    if topk_idx.shape[-1] > _lib.INT32_MAX:
        raise ValueError(f"topk_idx's slot count {topk_idx.shape[-1]} is past int32: at most {_lib.INT32_MAX} "
                         "(libfsa's plan)")
    if topk_layout not in ("thk", "hkt"):
        raise ValueError(f"topk_layout must be 'thk' or 'hkt', got {topk_layout!r}")
    if topk_idx.dim() == 2:
        if topk_idx.shape[0] != tq:
            raise ValueError(f"a shared selection is [Tq, K] = [{tq}, K]")
    elif topk_layout == "thk":
        if tuple(topk_idx.shape[:2]) != (tq, hkv):
            raise ValueError(f"topk_idx must be [Tq, Hkv, K] = [{tq}, {hkv}, K]")
    elif tuple(topk_idx.shape[:2]) != (hkv, tq):
        raise ValueError(f"topk_idx must be [Hkv, Tq, K] = [{hkv}, {tq}, K] with topk_layout 'hkt'")
    if topk_length is not None:
        if not (topk_length.dim() == 1 and topk_length.numel() == tq and topk_length.is_contiguous()):
            raise ValueError(f"topk_length must be [Tq] = [{tq}] contiguous, got shape {tuple(topk_length.shape)}")
    # The plan's int fields: ints within int32 (libfsa reports its own limits), scale as the other branches.
    _plan_int("block_size", block_size, 1)
    for name, value in (("max_batch", max_batch), ("max_query_tokens", max_query_tokens)):
        if value is not None:
            _plan_int(name, value, 0)
    _plan_int("splits", splits, 0)
    _lib.require_scale(scale)

    _require_cuda(q, k_cache, v_cache)


def _check_in_place_strides(q, k_cache, v_cache, block_table, batch):
    """What libfsa asks of the tensors it reads in place, as ValueError instead of its status: strides of q
    and the caches in multiples of 8 elements (a dimension of one has none that matters), at least one page
    with distinct pages, and a block table whose rows do not overlap."""
    # Every serving call runs this: each tensor's strides and shape are read once.
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        st, sh = t.stride(), t.shape
        if (sh[0] > 1 and st[0] % 8) or (sh[1] > 1 and st[1] % 8) or (t is not q and sh[2] > 1 and st[2] % 8):
            raise ValueError(f"{name}'s strides {tuple(st)} must be multiples of 8 elements (libfsa reads it in place)")
        if t is not q and sh[0] > 1 and st[0] == 0:
            raise ValueError(f"{name}'s pages are one memory (page stride 0): each page needs its own")
    pages, per_seq = k_cache.shape[0], block_table.shape[1]
    if pages < 1 or per_seq < 1:
        raise ValueError(f"the caches have {pages} pages and block_table {per_seq} per sequence: at least one")
    if batch > 1 and block_table.stride(0) < per_seq:
        raise ValueError(f"block_table's rows are {block_table.stride(0)} entries apart but hold "
                         f"{block_table.shape[1]}: rows must not overlap")


def _check_aligned(q, k_cache, v_cache):
    """The pointers of q and the caches 16-byte aligned (real tensors only: a fake one has no address)."""
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.data_ptr() % 16:
            raise ValueError(f"{name} must be 16-byte aligned (libfsa reads it in place)")


def kvcache_attention(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, topk_idx, block_size,
                      topk_length=None, topk_layout="thk", scale=None, return_lse=False, max_batch=None,
                      max_query_tokens=None, splits=0, validate=False):
    """Selected attention of q over a paged KV cache; returns o (and lse when asked).

    q: [Tq, Hq, D] bf16/fp16 CUDA tensor (new tokens of all sequences, packed).
    k_cache: [num_pages, page_size, Hkv, D], v_cache: [num_pages, page_size, Hkv, Dv] by strides (a
        permuted view of [num_pages, Hkv, page_size, D] works); last dim contiguous. D (query/key) and
        Dv (value head dim, e.g. NSA's 192 and 128) are multiples of 16 up to 256 and may differ.
    cu_seqlens_q: int32 [B+1] and seqused_k: int32 [B], both contiguous (read in place, never copied); B = 0
        ([0]) is an empty call, without query tokens. block_table: int32 [B, max_pages] (rows at least max_pages apart).
    topk_idx: int32 logical block numbers, [Tq, Hkv, K] (topk_layout "thk"), [Hkv, Tq, K] ("hkt"), or
        [Tq, K] (one selection shared by every KV head); -1 = unused.
    topk_length: optional int32 [Tq]: slots at or past it are unused.
    scale: softmax scale (None = 1/sqrt(D)). max_batch / max_query_tokens: the plan's sizes (default: the
        call's, rounded up to a power of two, at most INT32_MAX; max_batch at most MAX_BATCH). splits: shares of a one-tile sequence (0 = the plan's rule).
    validate: check the device metadata first (libfsa's check mode; waits for the GPU): bad metadata
        raises FsaError naming the problem instead of giving a clamped result.
    Returns o [Tq, Hq, Dv] (q's dtype) and, with return_lse, lse [Hq, Tq] float32 (natural log).
    """
    _att._check_flag("validate", validate)
    _att._check_flag("return_lse", return_lse)
    check_arguments(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, topk_idx, block_size, topk_length,
                    topk_layout, scale, max_batch, max_query_tokens, splits)
    args = (q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, topk_idx, topk_length, int(block_size),
            topk_layout, float(scale or 0.0), bool(return_lse), int(max_batch or 0), int(max_query_tokens or 0),
            int(splits), bool(validate))
    # Plain eager calls skip the operator's dispatch (tens of microseconds of host time per call);
    # torch.compile, fake tensors and tensor subclasses see the operator. So does a call whose q or cache
    # requires grad (in grad mode): _run's output would be silently detached, while the operator's carries
    # torch's node that refuses the backward (there is none).
    grads = torch.is_grad_enabled() and (q.requires_grad or k_cache.requires_grad or v_cache.requires_grad)
    o, lse = _run(*args) if _OP is None or (not grads and _plain_eager(*args[:8])) else _OP(*args)
    return (o, lse) if return_lse else o


def _plain_eager(*tensors):
    if torch.compiler.is_compiling() or _modes_active():
        return False
    # A view with the negative bit holds its values unnegated in memory: the operator resolves it.
    return all(t is None or (type(t) is torch.Tensor and not t.is_neg()) for t in tensors)


def _run(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, topk_idx, topk_length, block_size,
         topk_layout, scale, return_lse, max_batch, max_query_tokens, splits, validate):
    """The call of libfsa on checked arguments: (o, lse), lse empty unless return_lse."""
    tq, hq, d = q.shape
    num_pages, page, hkv, _ = k_cache.shape
    dv = v_cache.shape[3]
    batch = cu_seqlens_q.numel() - 1
    k = topk_idx.shape[-1]
    # [Tq, K] (one selection for every KV head), [Tq, Hkv, K] ("thk") or [Hkv, Tq, K] ("hkt"), as checked.
    if topk_idx.dim() == 2:
        head_stride, token_stride = 0, topk_idx.stride(0)
    elif topk_layout == "thk":
        head_stride, token_stride = topk_idx.stride(1), topk_idx.stride(0)
    else:
        head_stride, token_stride = topk_idx.stride(0), topk_idx.stride(1)
    if tq:
        _check_aligned(q, k_cache, v_cache)
    lib = _lib.get()
    device = _device_index(q.device)
    key = (device, q.dtype, d, hq, hkv, block_size, int(k), int(page),
           max_batch or _pow2_at_least(max(batch, 1), MAX_BATCH), max_query_tokens or _pow2_at_least(max(tq, 1)),
           scale, splits, validate, int(dv))
    handle, ws_bytes, counter_bytes = _plan(lib, key)
    o = torch.empty((tq, hq, dv), dtype=q.dtype, device=q.device)
    lse = torch.empty((hq, tq) if return_lse else (0,), dtype=torch.float32, device=q.device)
    # The workspace starts with counters that must be zero (the call leaves them zero again); the rest is
    # scratch: only those few bytes are zeroed per call, not the partial rows sized for max_batch.
    ws = None
    if ws_bytes:
        ws = torch.empty(ws_bytes, dtype=torch.uint8, device=q.device)
        ws.narrow(0, 0, counter_bytes).zero_()
    args = fsa_kvcache_args(
        num_query_tokens=tq, batch=batch,
        q=_tensor(q.data_ptr(), q.stride(0), q.stride(1)),
        cu_seqlens_q=cu_seqlens_q.data_ptr(),
        k_cache=_tensor(k_cache.data_ptr(), k_cache.stride(1), k_cache.stride(2)), k_page_stride=k_cache.stride(0),
        v_cache=_tensor(v_cache.data_ptr(), v_cache.stride(1), v_cache.stride(2)), v_page_stride=v_cache.stride(0),
        num_pages=num_pages, block_table=block_table.data_ptr(), block_table_stride=block_table.stride(0),
        max_pages_per_seq=block_table.shape[1], seqused_k=seqused_k.data_ptr(),
        topk=_tensor(topk_idx.data_ptr(), token_stride, head_stride),
        topk_length=topk_length.data_ptr() if topk_length is not None else 0,
        o=_tensor(o.data_ptr(), o.stride(0), o.stride(1)),
        lse=lse.data_ptr() if return_lse else 0,
        workspace=ws.data_ptr() if ws is not None else 0, workspace_bytes=ws_bytes,
    )
    stream = _stream(q.device)
    lib.check(_fn(lib, "fsa_kvcache_attention")(handle, ctypes.byref(args), stream), "fsa_kvcache_attention")
    return o, lse


# The call as a torch.library operator (torch 2.4 and newer), so that torch.compile captures it in one
# piece and fake tensors give its output shapes. Forward only: no autograd registration.
# The operator and its fake implementation run kvcache_attention's checks (on the operator's encoding), so
# that a direct call, or a trace of one, gets its errors.
_OP = None
if hasattr(torch.library, "custom_op"):
    from .attention import _example

    def _check_op(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, topk_idx, topk_length, block_size,
                  topk_layout, scale, max_batch, max_query_tokens, splits):
        block_size, max_batch, max_query_tokens, splits = (
            _example(x) for x in (block_size, max_batch, max_query_tokens, splits))
        check_arguments(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, topk_idx, block_size, topk_length,
                        topk_layout, scale or None, max_batch, max_query_tokens, splits)

    @torch.library.custom_op("fsa_jit::kvcache_attention", mutates_args=())
    def _op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cu_seqlens_q: torch.Tensor,
            seqused_k: torch.Tensor, block_table: torch.Tensor, topk_idx: torch.Tensor,
            topk_length: Optional[torch.Tensor], block_size: int, topk_layout: str, scale: float,
            return_lse: bool, max_batch: int, max_query_tokens: int, splits: int,
            validate: bool) -> tuple[torch.Tensor, torch.Tensor]:
        _check_op(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, topk_idx, topk_length, block_size,
                  topk_layout, scale, max_batch, max_query_tokens, splits)
        return _run(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, topk_idx, topk_length, block_size,
                    topk_layout, scale, return_lse, max_batch, max_query_tokens, splits, validate)

    @_op.register_fake
    def _op_fake(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, topk_idx, topk_length, block_size,
                 topk_layout, scale, return_lse, max_batch, max_query_tokens, splits, validate):
        _check_op(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, topk_idx, topk_length, block_size,
                  topk_layout, scale, max_batch, max_query_tokens, splits)
        tq, hq, _ = q.shape
        return (q.new_empty((tq, hq, v_cache.shape[3])),
                q.new_empty((hq, tq) if return_lse else (0,), dtype=torch.float32))

    _OP = _op


def kvcache_attention_reference(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, topk_idx, block_size,
                                topk_length=None, topk_layout="thk", scale=None):
    """The same in float64 PyTorch, written plainly (host loops): o [Tq, Hq, Dv] float64, lse [Hq, Tq]."""
    tq, hq, d = q.shape
    _, page, hkv, _ = k_cache.shape
    dv = v_cache.shape[3]
    g = hq // hkv
    scale = scale or d ** -0.5
    o = torch.zeros((tq, hq, dv), dtype=torch.float64, device=q.device)
    lse = torch.full((hq, tq), float("-inf"), dtype=torch.float64, device=q.device)
    cu = cu_seqlens_q.tolist()
    used = seqused_k.tolist()
    lengths = topk_length.tolist() if topk_length is not None else None
    for b in range(len(used)):
        n, L = cu[b + 1] - cu[b], used[b]
        if n == 0 or L <= 0:
            continue
        pages = block_table[b, : (L + page - 1) // page].long()
        keys = k_cache[pages].reshape(-1, hkv, d)[:L].double()
        vals = v_cache[pages].reshape(-1, hkv, dv)[:L].double()
        for i in range(n):
            t, pos = cu[b] + i, L - n + i
            if pos < 0:
                continue
            for h in range(hkv):
                if topk_idx.dim() == 2:
                    row = topk_idx[t].tolist()
                elif topk_layout == "thk":
                    row = topk_idx[t, h].tolist()
                else:
                    row = topk_idx[h, t].tolist()
                if lengths is not None:
                    row = row[: max(0, min(lengths[t], len(row)))]
                seen, visible = set(), []
                for idx in row:
                    if 0 <= idx <= pos // block_size and idx not in seen:
                        visible += range(idx * block_size, min((idx + 1) * block_size, pos + 1))
                    seen.add(idx)
                if not visible:
                    continue
                js = torch.tensor(visible, device=q.device)
                qs = q[t, h * g:(h + 1) * g].double()
                x = scale * qs @ keys[js, h].T
                lse[h * g:(h + 1) * g, t] = torch.logsumexp(x, dim=-1)
                o[t, h * g:(h + 1) * g] = torch.softmax(x, dim=-1) @ vals[js, h]
    return o, lse
