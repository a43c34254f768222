"""selected_attention: libfsa's forward and backward as PyTorch custom operators.

The forward and the backward are registered with torch.library as
fsa_jit::selected_attention_fwd and fsa_jit::selected_attention_bwd, each
with a fake (meta) implementation, and the forward's autograd formula calls
the backward operator: eager mode, autograd, torch.compile(fullgraph=True)
and CUDA graphs all go through the same two operators.

The call path does no host synchronisation and allocates only through torch's
caching allocator, so it can be captured in a CUDA graph (after a first eager
call has created the plan: plan creation compiles or loads kernels).

selected_attention checks the arguments (at trace time under torch.compile)
and passes them in the operators' encoding (scale 0.0 for the default, the
algorithm as a number, ...). The operators, and their fake implementations,
run the same checks on that encoding (check_operator), so that
torch.ops.fsa_jit.* called straight with a bad argument raises
selected_attention's error: tensor types, dtypes, ranks, shapes and how they
relate, one CUDA device, the parameters' ranges. Metadata only, never the
values: cu_seqlens' and topk_idx's entries are checked only by validate=True
or FSA_CHECK=1, on the device.
"""

import ctypes
import numbers
import threading

import torch

from . import _fast, _lib

if not hasattr(torch.library, "custom_op"):
    raise ImportError(f"fsa_jit.selected_attention needs torch 2.4 or newer (torch.library.custom_op); this is {torch.__version__}")

_DTYPES = {torch.bfloat16: _lib.FSA_DTYPE_BF16, torch.float16: _lib.FSA_DTYPE_F16}
BLOCK_SIZES = (16, 32, 64, 128, 256)
MAX_TOP_K = 64
MAX_HEAD_DIM = 256
# The backward accumulates dK and dV in one pass while Dk + Dv is at most this; wider heads split their
# columns in halves of whole 16-column steps (the library's FSA_BWD_ONE_PASS_COLS).
ONE_PASS_BWD_COLS = 320
# Query heads per KV head: at most MAX_GROUP (fsa_plan_create), the FSA path at most MAX_FSA_GROUP
# (FSA_FWD_MAX_GROUP); the NSA path a grid row per KV head and NSA_ROWS heads of its group, GRID_ROWS rows.
MAX_GROUP, MAX_FSA_GROUP, NSA_ROWS, GRID_ROWS = 128, 64, 16, 65535
_LAYOUTS = ("hkt", "thk")

# ------------------------------------------------------------------ validation


def _describe(t):
    return f"{tuple(t.shape)} {t.dtype} on {t.device}"


def _check_tensor(name, t):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    _check_dense(name, t)


def _check_dense(name, t):
    """Sparse, jagged or nested tensors have no strided memory the kernels could read (a nested tensor of
    the older kind reports the strided layout, so it is asked by name)."""
    if t.layout != torch.strided or t.is_nested:
        raise TypeError(f"{name} must be a dense (strided) tensor, got "
                        f"{'a nested tensor' if t.is_nested else f'layout {t.layout}'}")


def _check_host_readable(name, t):
    """A tensor whose values are read on the host: dense, with storage (a meta tensor has none)."""
    _check_dense(name, t)
    if t.is_meta:
        raise ValueError(f"{name} must hold values (it is read on the host), got a meta tensor")


def _check_flag(name, value):
    """A switch is a bool: a string such as "no" would otherwise turn it on."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def _topk_layout(topk_idx, hkv, t, layout):
    """'hkt' ([Hkv, T, K]) or 'thk' ([T, Hkv, K]) from the shape, or the caller's word."""
    shape = tuple(topk_idx.shape[:2])
    if layout is not None:
        if layout not in _LAYOUTS:
            raise ValueError(f"topk_layout must be 'hkt' ([Hkv, T, K]), 'thk' ([T, Hkv, K]) or None, got {layout!r}")
        want = (hkv, t) if layout == "hkt" else (t, hkv)
        if shape != want:
            raise ValueError(
                f"topk_idx has shape {tuple(topk_idx.shape)}, but topk_layout={layout!r} with Hkv={hkv} "
                f"and T={t} needs {want + (topk_idx.shape[2],)}"
            )
        return layout
    if hkv == t:
        raise ValueError(
            f"topk_idx shape {tuple(topk_idx.shape)} is ambiguous because Hkv == T == {t}: "
            "pass topk_layout='hkt' for [Hkv, T, K] or 'thk' for [T, Hkv, K]"
        )
    if shape == (hkv, t):
        return "hkt"
    if shape == (t, hkv):
        return "thk"
    raise ValueError(
        f"topk_idx must be [Hkv, T, K] = [{hkv}, {t}, K] or [T, Hkv, K] = [{t}, {hkv}, K], "
        f"got {tuple(topk_idx.shape)}"
    )


def check_token_count(name, count):
    """A token count libfsa's calls take: at most INT32_MAX - 1 (ValueError before any output is allocated)."""
    if count > _lib.INT32_MAX - 1:
        raise ValueError(f"{name} has {count} tokens: at most {_lib.INT32_MAX - 1} (libfsa's calls)")


def check_max_seqlen(max_seqlen, t_len):
    """max_seqlen: None or a host int in 0..T (also checked by the NSA layer before its first branch)."""
    if max_seqlen is not None:
        if isinstance(max_seqlen, bool) or not isinstance(max_seqlen, numbers.Integral):
            raise TypeError(f"max_seqlen must be a Python int or None (a tensor would need a host sync), got {type(max_seqlen).__name__}")
        if not 0 <= max_seqlen <= t_len:
            raise ValueError(f"max_seqlen must be in 0..T = 0..{t_len}, got {max_seqlen}")


def check_arguments(q, k, v, topk_idx, cu_seqlens, block_size, scale=None, max_seqlen=None,
                    algorithm="auto", topk_layout=None, require_cuda=True, backward=False):
    """Checks the arguments of selected_attention without touching a device or libfsa.

    backward: the plan will have the backward kernels (as it will when q, k or v requires grad in grad mode).
    Returns (layout, algorithm code). Raises TypeError or ValueError.
    """
    for name, t in (("q", q), ("k", k), ("v", v), ("topk_idx", topk_idx), ("cu_seqlens", cu_seqlens)):
        _check_tensor(name, t)

    # dtypes
    if q.dtype not in _DTYPES:
        raise TypeError(f"q must be torch.float16 or torch.bfloat16, got {q.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k and v must have the same dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}")
    if topk_idx.dtype != torch.int32:
        raise TypeError(f"topk_idx must be torch.int32, got {topk_idx.dtype} (use topk_idx.int())")
    if cu_seqlens.dtype != torch.int32:
        raise TypeError(f"cu_seqlens must be torch.int32, got {cu_seqlens.dtype} (use cu_seqlens.int())")

    # ranks and shapes
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 3:
            raise ValueError(f"{name} must be 3-D [T, heads, head_dim] (packed varlen layout), got shape {tuple(t.shape)}")
    if topk_idx.dim() != 3:
        raise ValueError(f"topk_idx must be 3-D, [Hkv, T, K] or [T, Hkv, K], got shape {tuple(topk_idx.shape)}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError(
            f"cu_seqlens must be 1-D [batch + 1] with at least 2 entries, got shape {tuple(cu_seqlens.shape)}"
        )
    t_len, hq, d = q.shape
    if k.shape[:2] != v.shape[:2]:
        raise ValueError(
            f"k and v must have the same tokens and KV heads, got {tuple(k.shape)} and {tuple(v.shape)} "
            "(only their head dims may differ)"
        )
    if k.shape[0] != t_len:
        raise ValueError(f"q has T={t_len} tokens but k and v have {k.shape[0]}: all are packed over the same tokens")
    check_token_count("q", t_len)
    hkv = k.shape[1]
    if k.shape[2] != d:
        raise ValueError(f"q has head_dim {d} but k has {k.shape[2]}: q and k share the query/key head dim")
    if hkv < 1 or hq < 1:
        raise ValueError(f"need at least one head: q has {hq}, k and v have {hkv}")
    if hq % hkv != 0:
        raise ValueError(f"the number of query heads ({hq}) must be a multiple of the number of KV heads ({hkv})")
    if d % 16 != 0 or not 16 <= d <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim {d} is not supported: it must be a multiple of 16 from 16 to {MAX_HEAD_DIM}")
    dv = v.shape[2]
    if dv % 16 != 0 or not 16 <= dv <= MAX_HEAD_DIM:
        raise ValueError(
            f"v's head dim {dv} is not supported: it must be a multiple of 16 from 16 to {MAX_HEAD_DIM}"
        )
    group = hq // hkv
    if group > MAX_GROUP:
        raise ValueError(f"group size {group} (Hq {hq} / Hkv {hkv}): at most {MAX_GROUP} query heads per KV head")
    grads = backward or (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad))
    if grads and d + dv > ONE_PASS_BWD_COLS and (d % 32 or dv % 32):
        raise ValueError(
            f"the backward with head dims {d} (q, k) and {dv} (v): when together over {ONE_PASS_BWD_COLS}, both "
            "must be multiples of 32"
        )
    layout = _topk_layout(topk_idx, hkv, t_len, topk_layout)
    top_k = topk_idx.shape[2]
    if not 1 <= top_k <= MAX_TOP_K:
        raise ValueError(f"top-k (last dim of topk_idx) must be 1..{MAX_TOP_K}, got {top_k}")
    batch = cu_seqlens.numel() - 1
    if t_len > 0 and batch > t_len:
        raise ValueError(f"cu_seqlens describes {batch} sequences for only {t_len} tokens")

    # parameters
    if isinstance(block_size, bool) or not isinstance(block_size, numbers.Integral):
        raise TypeError(f"block_size must be an int, got {type(block_size).__name__}")
    if block_size not in BLOCK_SIZES:
        raise ValueError(f"block_size must be one of {BLOCK_SIZES}, got {block_size}")
    _lib.require_scale(scale)
    check_max_seqlen(max_seqlen, t_len)
    if not isinstance(algorithm, str) or algorithm.lower() not in _lib.ALGORITHMS:
        raise ValueError(f"algorithm must be 'auto', 'fsa' or 'nsa', got {algorithm!r}")
    if algorithm.lower() == "fsa" and group > MAX_FSA_GROUP:
        raise ValueError(f"algorithm 'fsa' takes groups of at most {MAX_FSA_GROUP} query heads per KV head, got "
                         f"{group}")
    if algorithm.lower() == "nsa" and hkv * -(-group // NSA_ROWS) > GRID_ROWS:
        raise ValueError(f"algorithm 'nsa' needs a grid row per KV head and {NSA_ROWS} heads of its group: {hkv} KV "
                         f"heads at group {group} pass {GRID_ROWS} rows")

    # devices last, so that everything above can be checked on a CPU-only machine
    if require_cuda:
        for name, t in (("q", q), ("k", k), ("v", v), ("topk_idx", topk_idx), ("cu_seqlens", cu_seqlens)):
            if not t.is_cuda:  # not device.type: several times dearer, and every operator call checks
                raise ValueError(f"{name} must be a CUDA tensor, got {_describe(t)}")
        for name, t in (("k", k), ("v", v), ("topk_idx", topk_idx), ("cu_seqlens", cu_seqlens)):
            if t.device != q.device:
                raise ValueError(f"{name} is on {t.device} but q is on {q.device}: all tensors must be on one device")
    return layout, _lib.ALGORITHMS[algorithm.lower()]


_ALGORITHM_NAMES = {code: name for name, code in _lib.ALGORITHMS.items()}


def _example(x):
    """An int argument of an operator as the checks take it. torch.compile passes an int that varied between
    calls as a symbolic int: its example value is checked, without adding a guard (the operator checks each
    call's own value when it runs)."""
    if isinstance(x, torch.SymInt):
        hint = getattr(x.node, "hint", None)
        return int(x) if hint is None else hint  # int(): a guard, where torch keeps no example value
    return x


def check_operator(q, k, v, topk_idx, cu_seqlens, block_size, scale, max_seqlen, algorithm, topk_layout,
                   workspace_limit, backward):
    """check_arguments on the operators' encoding: scale 0.0 = 1/sqrt(D), max_seqlen 0 = unknown, algorithm an
    FSA_ALGORITHM_* code, topk_layout 'hkt' or 'thk', workspace_limit in bytes (0 = libfsa's default cap, -1 =
    none). A direct torch.ops.fsa_jit.selected_attention_* call gets selected_attention's errors."""
    block_size, max_seqlen, algorithm, workspace_limit = (
        _example(x) for x in (block_size, max_seqlen, algorithm, workspace_limit))
    name = _ALGORITHM_NAMES.get(algorithm)
    if name is None:
        raise ValueError(f"algorithm must be an FSA_ALGORITHM_* code: 0 (auto), 1 (fsa) or 2 (nsa), got {algorithm!r}")
    if workspace_limit != -1:
        _lib.parse_workspace_limit(workspace_limit)
    check_arguments(q, k, v, topk_idx, cu_seqlens, block_size, scale or None, max_seqlen, name, topk_layout,
                    backward=backward)


def check_backward_operands(q, v, o, lse, dout):
    """The backward operators' own tensors, q and v checked: o and dout [T, Hq, Dv] in q's dtype, lse float32
    [Hq, T], on q's device (any strides: the operators copy what libfsa cannot read in place)."""
    named = (("o", o), ("lse", lse), ("dout", dout))
    for name, t in named:
        _check_tensor(name, t)
    t_len, hq, _ = q.shape
    rows = (t_len, hq, v.shape[2])
    for name, t in (("o", o), ("dout", dout)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name} must have q's dtype {q.dtype}, got {t.dtype}")
        if tuple(t.shape) != rows:
            raise ValueError(f"{name} must be [T, Hq, Dv] = {list(rows)}, got shape {tuple(t.shape)}")
    if lse.dtype != torch.float32:
        raise TypeError(f"lse must be torch.float32, got {lse.dtype}")
    if tuple(lse.shape) != (hq, t_len):
        raise ValueError(f"lse must be [Hq, T] = [{hq}, {t_len}], got shape {tuple(lse.shape)}")
    for name, t in named:
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}: all tensors must be on one device")


# ------------------------------------------------------------ tensor layout


def _head_strides(t):
    """(token stride, head stride) in elements of a [T, H, D] tensor the kernels can read.

    The stride of a dimension of size 1 is never used, so any such stride is
    replaced by the contiguous one rather than forcing a copy.
    """
    ts = t.stride(0) if t.shape[0] != 1 else t.shape[1] * t.shape[2]
    hs = t.stride(1) if t.shape[1] != 1 else t.shape[2]
    return ts, hs


def _kernel_ready(t):
    """t itself when libfsa can read it in place, else a contiguous copy.

    libfsa needs the last dim contiguous, a 16-byte aligned pointer and token
    and head strides that are multiples of 8 elements, and the values in memory
    (a view with the negative bit holds them unnegated; the copy resolves it).
    """
    ts, hs = _head_strides(t)
    if t.stride(2) == 1 and t.data_ptr() % 16 == 0 and ts % 8 == 0 and hs % 8 == 0 and not t.is_neg():
        return t
    return t.clone(memory_format=torch.contiguous_format)


def _topk_ready(topk_idx, layout):
    """(tensor, head stride, token stride) with the slots contiguous."""
    if topk_idx.shape[2] != 1 and topk_idx.stride(2) != 1:
        topk_idx = topk_idx.contiguous()
    if layout == "hkt":
        return topk_idx, topk_idx.stride(0), topk_idx.stride(1)
    return topk_idx, topk_idx.stride(1), topk_idx.stride(0)


# ----------------------------------------------------------- contexts, plans

_lock = threading.Lock()
_contexts = {}  # (device index, validate, tune) -> fsa_context *
_contexts_lock = threading.Lock()
_tune = None  # set_tuning(): fsa_context_options.tune of contexts made from now on
_plans = {}  # plan key -> _Plan


class _Plan:
    def __init__(self, handle, key, backward):
        self.handle = handle
        self.key = key
        self.backward = backward  # created with desc.backward = 1

    def workspace_bytes(self, lib, total_tokens, batch, backward=False):
        size = ctypes.c_size_t(0)
        if backward:
            st = lib.fsa_plan_workspace_size_bwd(ctypes.byref(size), self.handle, total_tokens, batch)
            lib.check(st, "fsa_plan_workspace_size_bwd")
        else:
            st = lib.fsa_plan_workspace_size(ctypes.byref(size), self.handle, total_tokens, batch)
            lib.check(st, "fsa_plan_workspace_size")
        return size.value


def set_tuning(mode):
    """Tuning of the plans made from now on: "off", "on", "force" (any case), or None ($FSA_TUNE decides; off
    when unset).

    With "on", the first call of a shape bucket (tokens rounded up to a power of two) without a tuning
    record times every variant on the call's stream, waiting for the timings (host synchronizations:
    one untimed and one timed run of every variant, then up to 5 timed rounds in all while under about
    300 ms; never while a CUDA graph is being captured), and records the
    fastest in the kernel cache directory for every later call and process. "off" never measures but
    uses records already there; "force" ignores records on disk and measures again.
    """
    global _tune
    if mode is not None and not isinstance(mode, str):
        raise TypeError(f"tuning mode must be a str or None, got {type(mode).__name__}")
    given = mode
    if mode is not None:
        mode = mode.lower()  # as FSA_TUNE
    if mode not in _lib.TUNE_MODES:
        raise ValueError(f"tuning mode {given!r}: expected 'off', 'on', 'force' (any case) or None")
    _tune = mode
    _fast.invalidate()  # its entries hold plans of the previous mode


_TUNE_NOW = object()  # _context's default: the mode set_tuning set


def _context(lib, device_index, validate=False, tune=_TUNE_NOW):
    """The context of (device, check mode, tuning mode: by default the one set_tuning set)."""
    tune = _tune if tune is _TUNE_NOW else tune
    key = (device_index, bool(validate), tune)
    ctx = _contexts.get(key)
    if ctx is not None:
        return ctx
    # Its own lock: the plan caches (selected, paged cache, branches) call this under locks of their own.
    with _contexts_lock:
        ctx = _contexts.get(key)
        if ctx is None:
            handle = ctypes.c_void_p()
            # validate: libfsa's check mode (else $FSA_CHECK decides).
            options = _lib.fsa_context_options(device=device_index, check=1 if validate else 0,
                                               tune=_lib.TUNE_MODES[tune])
            lib.check(lib.fsa_context_create(ctypes.byref(handle), ctypes.byref(options)), "fsa_context_create")
            ctx = _contexts[key] = handle.value
    return ctx


def refuse_plan_in_capture(device_index, what):
    """Plan creation compiles or loads kernels, which must not run inside a CUDA graph capture (libfsa's
    contract; the driver may refuse the load and invalidate the capture): a clear error instead."""
    if not torch.cuda.is_available():
        return
    with torch.cuda.device(device_index):
        capturing = torch.cuda.is_current_stream_capturing()
    if capturing:
        raise RuntimeError(f"{what}: this call needs a new plan (kernels compiled or loaded), which cannot be made "
                           "during a CUDA graph capture; make one eager call of the same shape (and sizes) before "
                           "capturing")


def _get_plan(lib, device_index, dtype, head_dim, hq, hkv, block_size, top_k, scale, algorithm, workspace_limit,
              backward, validate=False, value_dim=None):
    # A library without the backward gets forward-only plans; the backward
    # then fails with a clear message instead of the forward failing.
    backward = bool(backward) and lib.has_backward
    value_dim = head_dim if value_dim is None else value_dim
    base = (device_index, dtype, head_dim, hq, hkv, block_size, top_k, scale, algorithm, workspace_limit, validate,
            _tune, value_dim)
    plan = _plans.get(base + (backward,))
    if plan is None and not backward:
        plan = _plans.get(base + (True,))  # a backward plan also runs the forward
    if plan is not None:
        return plan
    with _lock:
        plan = _plans.get(base + (backward,))
        if plan is not None:
            return plan
        refuse_plan_in_capture(device_index, "selected_attention")
        ctx = _context(lib, device_index, validate, base[11])  # the mode the plan is cached under
        desc = _lib.fsa_selected_attention_desc(
            dtype=_DTYPES[dtype], head_dim=head_dim, num_q_heads=hq, num_kv_heads=hkv,
            block_size=block_size, top_k=top_k, scale=scale, algorithm=algorithm,
            workspace_limit=_lib.workspace_limit_field(workspace_limit), backward=int(backward),
            value_dim=0 if value_dim == head_dim else value_dim,
        )
        handle = ctypes.c_void_p()
        lib.check(lib.fsa_plan_create(ctypes.byref(handle), ctx, ctypes.byref(desc)), "fsa_plan_create")
        plan = _plans[base + (backward,)] = _Plan(handle.value, base + (backward,), backward)
        return plan


def clear_plans():
    """Destroys every cached plan (contexts stay); later calls create them again.

    A captured CUDA graph that used one of them must not be replayed afterwards, and no other thread may be
    inside a call meanwhile (a plan is destroyed at once, not after the calls using it).
    """
    lib = _lib._library
    with _lock:
        _fast.invalidate()
        plans = list(_plans.values())
        _plans.clear()
        if lib is not None:
            for p in plans:
                lib.fsa_plan_destroy(p.handle)


def cached_plans():
    """Keys of the cached plans: (device, dtype, head_dim, Hq, Hkv, block_size, top_k, scale, algorithm,
    workspace_limit, validate, tune, value_dim, backward)."""
    return list(_plans)


def _workspace(nbytes, device):
    """(tensor keeping the memory alive, address); torch's allocator, so graph capture works."""
    if nbytes == 0:
        return None, 0
    ws = torch.empty(nbytes, dtype=torch.uint8, device=device)
    if ws.data_ptr() % 256 != 0:  # torch hands out 512-byte aligned blocks
        raise RuntimeError(f"workspace at {ws.data_ptr():#x} is not 256-byte aligned")
    return ws, ws.data_ptr()


def _stream(device):
    """The current stream's handle on `device` (a torch.device), without making a Stream object."""
    return _fast._raw_stream(torch.cuda.current_device() if device.index is None else device.index)


# ------------------------------------------------------------------ operators
#
# Tensors cross the operator boundary as the caller made them; what libfsa
# cannot read in place is copied inside, where data pointers are available
# (tracing sees only shapes). Non-tensor arguments: block_size, scale (0.0 =
# 1/sqrt(D)), max_seqlen (0 = unknown), algorithm (FSA_ALGORITHM_*),
# topk_layout ('hkt' or 'thk'), workspace_limit (bytes; 0 = libfsa's default cap, -1 = none).
# Each operator and its fake implementation first check them all (check_operator).


def _scale32(scale):
    # The plan holds a float; key the cache on the value it will hold.
    return float(ctypes.c_float(scale).value)


def _view(t):
    return _lib.fsa_tensor(t.data_ptr(), *_head_strides(t))


def _float_view(t):
    """A float32 [T, H] tensor (any strides; 0 repeats a value) as libfsa's view; None: none (ptr 0)."""
    if t is None:
        return _lib.fsa_tensor(0, 0, 0)
    return _lib.fsa_tensor(t.data_ptr(), t.stride(0), t.stride(1))


@torch.library.custom_op("fsa_jit::selected_attention_fwd", mutates_args=())
def _fwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, topk_idx: torch.Tensor, cu_seqlens: torch.Tensor,
            block_size: int, scale: float, max_seqlen: int, algorithm: int, topk_layout: str, workspace_limit: int,
            backward: bool, validate: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    check_operator(q, k, v, topk_idx, cu_seqlens, block_size, scale, max_seqlen, algorithm, topk_layout,
                   workspace_limit, backward)
    t_len, hq, d = q.shape
    if t_len == 0:
        return (torch.empty((0, hq, v.shape[2]), dtype=q.dtype, device=q.device),
                torch.empty((hq, 0), dtype=torch.float32, device=q.device))
    q, k, v = _kernel_ready(q), _kernel_ready(k), _kernel_ready(v)
    cu_seqlens = cu_seqlens.contiguous()
    topk_idx = _topk_ready(topk_idx, topk_layout)[0]
    # The plan, the argument structure and the workspace sizes of this key, made once (_fast.py).
    e = _fast.op_entry(q, k, v, topk_idx, block_size, scale, algorithm, topk_layout, workspace_limit, backward,
                       validate)
    return e.forward(q, k, v, topk_idx, cu_seqlens, cu_seqlens.numel() - 1, max_seqlen)


@_fwd_op.register_fake
def _fwd_fake(q, k, v, topk_idx, cu_seqlens, block_size, scale, max_seqlen, algorithm, topk_layout,
              workspace_limit, backward, validate=False):
    check_operator(q, k, v, topk_idx, cu_seqlens, block_size, scale, max_seqlen, algorithm, topk_layout,
                   workspace_limit, backward)
    t_len, hq, _ = q.shape
    return q.new_empty((t_len, hq, v.shape[2])), q.new_empty((hq, t_len), dtype=torch.float32)


def _check_bwd(dout, q, k, v, o, lse, topk_idx, cu_seqlens, block_size, scale, max_seqlen, algorithm, topk_layout,
               workspace_limit):
    check_operator(q, k, v, topk_idx, cu_seqlens, block_size, scale, max_seqlen, algorithm, topk_layout,
                   workspace_limit, True)
    check_backward_operands(q, v, o, lse, dout)


@torch.library.custom_op("fsa_jit::selected_attention_bwd", mutates_args=())
def _bwd_op(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
            lse: torch.Tensor, topk_idx: torch.Tensor, cu_seqlens: torch.Tensor, block_size: int, scale: float,
            max_seqlen: int, algorithm: int, topk_layout: str,
            workspace_limit: int, validate: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_bwd(dout, q, k, v, o, lse, topk_idx, cu_seqlens, block_size, scale, max_seqlen, algorithm, topk_layout,
               workspace_limit)
    if q.shape[0] == 0:
        return tuple(torch.empty(x.shape, dtype=x.dtype, device=x.device) for x in (q, k, v))
    _lib.get().require_backward()
    q, k, v, o, dout = (_kernel_ready(x) for x in (q, k, v, o, dout))
    lse, cu_seqlens = lse.contiguous(), cu_seqlens.contiguous()
    topk_idx = _topk_ready(topk_idx, topk_layout)[0]
    # Looked up rather than kept from the forward: clear_plans() may have run since.
    e = _fast.op_entry(q, k, v, topk_idx, block_size, scale, algorithm, topk_layout, workspace_limit, True, validate)
    out = e.backward(dout, q, k, v, o, lse, topk_idx, cu_seqlens, cu_seqlens.numel() - 1, max_seqlen)
    if out is None:
        raise RuntimeError("selected_attention: the backward needs a plan with backward kernels")
    return out


@_bwd_op.register_fake
def _bwd_fake(dout, q, k, v, o, lse, topk_idx, cu_seqlens, block_size, scale, max_seqlen, algorithm, topk_layout,
              workspace_limit, validate=False):
    _check_bwd(dout, q, k, v, o, lse, topk_idx, cu_seqlens, block_size, scale, max_seqlen, algorithm, topk_layout,
               workspace_limit)
    # Contiguous, as the real operator allocates them (empty_like would copy a view's strides).
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    (q, k, v, topk_idx, cu_seqlens, block_size, scale, max_seqlen, algorithm, topk_layout, workspace_limit, _,
     validate) = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, topk_idx, cu_seqlens)
    ctx.call = (block_size, scale, max_seqlen, algorithm, topk_layout, workspace_limit, validate)
    ctx.mark_non_differentiable(lse)


def _backward(ctx, do, _dlse):
    q, k, v, o, lse, topk_idx, cu_seqlens = ctx.saved_tensors
    dq, dk, dv = torch.ops.fsa_jit.selected_attention_bwd(do, q, k, v, o, lse, topk_idx, cu_seqlens, *ctx.call)
    need = ctx.needs_input_grad
    return (dq if need[0] else None, dk if need[1] else None, dv if need[2] else None) + (None,) * 10


_fwd_op.register_autograd(_backward, setup_context=_setup_context)


def selected_attention(q, k, v, topk_idx, cu_seqlens, block_size, scale=None, max_seqlen=None,
                       return_lse=False, algorithm="auto", topk_layout=None, workspace_limit=None, validate=False):
    """Native Sparse Attention's selected (top-k block) attention over a packed varlen batch.

    q [T, Hq, D], k [T, Hkv, D] and v [T, Hkv, Dv]: fp16 or bf16 on one CUDA
    device; D (the query/key head dim) and Dv (the value head dim, e.g. NSA's
    192 and 128) are multiples of 16 up to 256, and may differ (with
    gradients and D + Dv over 320, both multiples of 32). Any strides:
    read in place when the last dim is contiguous, the pointer 16-byte
    aligned and the token and head strides multiples of 8 elements, else
    copied.
    topk_idx: int32 [Hkv, T, K] or [T, Hkv, K] (topk_layout 'hkt' / 'thk'
    when Hkv == T makes the shape ambiguous); block indices inside each
    token's sequence, -1 = unused; blocks after the token's own are ignored.
    cu_seqlens: int32 [B + 1] on the same device, cu_seqlens[-1] == T.
    block_size: keys per block (16, 32, 64, 128 or 256). scale: softmax
    scale, None = 1/sqrt(D). max_seqlen: longest sequence, if known (host int).
    algorithm: 'auto', 'fsa' or 'nsa'. workspace_limit: cap on the device
    workspace of each call, forward and backward alike, in bytes (an int, or
    a string such as '512M' or '2G'); None or 0 = libfsa's default cap
    (what the outputs alive during the call leave of 2848 MiB, at least
    256 MiB, for a backward plus one KV head's fp32 dK/dV accumulator over
    every token: short calls run in one chunk); 'unlimited' or math.inf = no
    cap (fastest, but the workspace grows with T: gigabytes at 64K tokens).
    Larger problems run in chunks (of KV heads, then of tokens) that fit.
    validate: libfsa's check mode: a kernel first checks cu_seqlens and
    topk_idx on the device (cu_seqlens starts at 0, never falls, ends at T;
    each entry -1 or a block of the token's sequence, none twice in a row)
    and bad metadata raises instead of giving a meaningless result. Each call
    then waits for the check (a host synchronization); under CUDA graph
    capture the check is skipped. FSA_CHECK=1 turns it on for every call.

    Returns o [T, Hq, Dv] (same dtype as q), and lse [Hq, T] fp32 (natural log;
    -inf for rows with no visible key) when return_lse. Differentiable with
    respect to q, k and v, once (differentiating the gradients, taken with
    create_graph=True, raises); lse carries no gradient. Works in eager mode, under
    torch.compile (fullgraph=True included) and in CUDA graphs.
    """
    if return_lse is not True and return_lse is not False:  # a bool: "no" would turn it on
        _check_flag("return_lse", return_lse)
    # Plain eager calls of a known shape skip the operator's dispatch and the per-shape work (_fast.py).
    out = _fast.selected_attention(q, k, v, topk_idx, cu_seqlens, block_size, scale, max_seqlen, algorithm,
                                   topk_layout, workspace_limit, validate)
    if out is not None:
        return out if return_lse else out[0]
    _check_flag("validate", validate)
    layout, algo = check_arguments(q, k, v, topk_idx, cu_seqlens, block_size, scale, max_seqlen, algorithm, topk_layout)
    limit = _lib.parse_workspace_limit(workspace_limit)
    # Grad mode is off inside the operator: decide here whether the plan needs backward kernels.
    needs_backward = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    o, lse = torch.ops.fsa_jit.selected_attention_fwd(
        q, k, v, topk_idx, cu_seqlens, int(block_size), 0.0 if scale is None else float(scale),
        0 if max_seqlen is None else int(max_seqlen), algo, layout, limit, needs_backward, bool(validate))
    return (o, lse) if return_lse else o


def plan_choice(total_tokens, *, dtype, head_dim, num_q_heads, num_kv_heads, block_size, top_k=16, device=0,
                algorithm="auto", backward=False, value_dim=None):
    """What a call of `total_tokens` tokens takes on the plan of this shape (made if needed; dtype:
    torch.bfloat16 or torch.float16; value_dim: v's head dim, None or 0 = head_dim), and why.

    Returns a dict: algorithm ("fsa" or "nsa": the loop order; backward: the dq order), variant, source
    ("forced", "only_one", "heuristic" or "measured": from a tuning record), reason, bucket_tokens,
    candidates and will_measure (the next call of this size measures). Never measures.
    """
    # The arguments as selected_attention takes them, ints within the descriptor's int32 fields.
    if not isinstance(dtype, torch.dtype) or dtype not in _DTYPES:
        raise TypeError(f"dtype must be torch.bfloat16 or torch.float16, got {dtype!r}")
    if not isinstance(algorithm, str) or algorithm.lower() not in _lib.ALGORITHMS:
        raise ValueError(f"algorithm must be 'auto', 'fsa' or 'nsa', got {algorithm!r}")
    _lib.require_int("total_tokens", total_tokens, 0, 2**63 - 1)
    for name, value in (("head_dim", head_dim), ("num_q_heads", num_q_heads), ("num_kv_heads", num_kv_heads),
                        ("block_size", block_size), ("top_k", top_k)):
        _lib.require_int(name, value, 1)
    if value_dim is not None:  # an int; 0 is head_dim, as in the descriptor
        _lib.require_int("value_dim", value_dim, 0)
    _lib.require_int("device", device, 0)
    lib = _lib.get()
    if lib.fsa_plan_choice_get is None:
        raise RuntimeError(f"{lib.path} has no fsa_plan_choice_get; rebuild libfsa from a newer version")
    algo = _lib.ALGORITHMS[algorithm.lower()]
    # 0 as None: the plan a call of v's head dim uses (a plan cached under 0 would be another one).
    plan = _get_plan(lib, device, dtype, head_dim, num_q_heads, num_kv_heads, block_size, top_k, 0.0, algo, 0,
                     backward, value_dim=value_dim or None)
    c = _lib.fsa_plan_choice()
    op = _lib.FSA_OPERATION_BACKWARD if backward else _lib.FSA_OPERATION_FORWARD
    st = lib.fsa_plan_choice_get(ctypes.byref(c), plan.handle, op, total_tokens)
    lib.check(st, "fsa_plan_choice_get")
    return {
        "algorithm": "nsa" if c.algorithm == 2 else "fsa",
        "variant": _lib._text(c.variant),
        "source": _lib.CHOICE_SOURCES[c.source],
        "reason": _lib._text(c.reason),
        "bucket_tokens": c.bucket_tokens,
        "candidates": c.candidates,
        "will_measure": bool(c.will_measure),
    }
