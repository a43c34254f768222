"""compressed_attention: NSA's compression branch (libfsa's fsa_compressed_*) as PyTorch custom operators.

Queries attend to compressed keys and values that the caller made with kernel
size l and stride d per sequence: compressed token j of a sequence covers its
positions j*d .. j*d + l - 1 and is visible to the query at position t when
j*d + l - 1 <= t. With top_k > 0 the forward also selects, per KV head and
query token, the top_k blocks of block_size positions for
fsa_jit.selected_attention, from the compressed attention probabilities
summed over the group's query heads.

Registered as fsa_jit::compressed_attention_fwd and
fsa_jit::compressed_attention_bwd with fake implementations and an autograd
formula, so eager mode, autograd, torch.compile and CUDA graphs (after a first
eager call made the plan) use the same two operators. No host
synchronisation, except with validate=True (libfsa's check mode). The
operators and their fake implementations run compressed_attention's checks on
their own encoding (scale 0.0 for the default), the backward also those of o,
lse and dout: metadata only; the offsets' values are checked by validate=True.
"""

import ctypes
import threading

import torch

from . import _lib
from . import _nsa_abi as abi
from . import attention as _att

MAX_GROUP = 16
MAX_KERNEL_SIZE = 4096
MAX_SELECTION_STRIDES = 64  # BK / d, and (l - 1) / d: keys one selection tile of the kernel holds


# An int in low..high (TypeError, ValueError); without high, at most INT32_MAX (the descriptors' int fields).
require_int = _lib.require_int


def check_dims(what, d):
    if d % 16 != 0 or not 16 <= d <= _att.MAX_HEAD_DIM:
        raise ValueError(f"{what} {d} is not supported: it must be a multiple of 16 from 16 to {_att.MAX_HEAD_DIM}")


def check_common(tensors, q, cu_names):
    """Type, dtype and rank checks shared by the NSA branches (devices: check_devices). tensors: (name, tensor)
    of q, k, v and the int32 offsets named in cu_names."""
    for name, t in tensors:
        _att._check_tensor(name, t)
    floats = [(n, t) for n, t in tensors if n not in cu_names]
    if q.dtype not in _att._DTYPES:
        raise TypeError(f"q must be torch.float16 or torch.bfloat16, got {q.dtype}")
    for name, t in floats:
        if t.dtype != q.dtype:
            raise TypeError(f"{name} must have q's dtype {q.dtype}, got {t.dtype}")
        if t.dim() != 3:
            raise ValueError(f"{name} must be 3-D [tokens, heads, dim] (packed varlen layout), got shape {tuple(t.shape)}")
    for name, t in tensors:
        if name in cu_names:
            if t.dtype != torch.int32:
                raise TypeError(f"{name} must be torch.int32, got {t.dtype} (use {name}.int())")
            if t.dim() != 1 or t.numel() < 2:
                raise ValueError(f"{name} must be 1-D [batch + 1] with at least 2 entries, got shape {tuple(t.shape)}")


def check_devices(tensors, q, q_name="q"):
    for name, t in tensors:
        if not t.is_cuda:
            raise ValueError(f"{name} must be a CUDA tensor, got {_att._describe(t)}")
    for name, t in tensors:
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but {q_name} is on {q.device}: all tensors must be on one "
                             "device")


def check_heads(hq, hkv):
    if hq < 1 or hkv < 1:
        raise ValueError(f"need at least one head: q has {hq}, the keys have {hkv}")
    if hq % hkv != 0:
        raise ValueError(f"the number of query heads ({hq}) must be a multiple of the number of KV heads ({hkv})")
    if hkv > 65535:  # the kernels' grid rows are KV heads
        raise ValueError(f"at most 65535 KV heads, got {hkv}")
    if hq // hkv > MAX_GROUP:
        raise ValueError(f"group size {hq // hkv} (Hq {hq} / Hkv {hkv}) is not supported: at most {MAX_GROUP}")


def check_scale(scale):
    _lib.require_scale(scale)


def check_selection(kernel_size, stride, top_k, block_size, init_blocks, local_blocks):
    require_int("top_k", top_k, 0, _att.MAX_TOP_K)
    if top_k == 0:
        return
    require_int("block_size", block_size, 1)
    ratio = block_size // stride
    if block_size % stride != 0 or ratio & (ratio - 1) or ratio > MAX_SELECTION_STRIDES:
        raise ValueError(f"block_size {block_size} must be a multiple of stride {stride} with block_size / stride "
                         f"a power of two up to {MAX_SELECTION_STRIDES}")
    if (kernel_size - 1) // stride > MAX_SELECTION_STRIDES:
        raise ValueError(f"kernel_size {kernel_size} over stride {stride}: the selection takes at most "
                         f"{MAX_SELECTION_STRIDES} strides per kernel")
    require_int("init_blocks", init_blocks, 0)
    require_int("local_blocks", local_blocks, 0)


def check_arguments(q, k, v, cu_seqlens, cu_seqlens_c, kernel_size, stride, scale=None, top_k=0, block_size=64,
                    init_blocks=1, local_blocks=2, require_cuda=True, names=("k", "v")):
    """Checks compressed_attention's arguments without touching a device or libfsa (TypeError, ValueError).
    names: what the messages call k and v (the NSA layer passes its k_cmp and v_cmp)."""
    kn, vn = names
    tensors = (("q", q), (kn, k), (vn, v), ("cu_seqlens", cu_seqlens), ("cu_seqlens_c", cu_seqlens_c))
    check_common(tensors, q, ("cu_seqlens", "cu_seqlens_c"))
    t_len, hq, dk = q.shape
    if k.shape[:2] != v.shape[:2]:
        raise ValueError(f"{kn} and {vn} must have the same [Tc, Hkv], got {tuple(k.shape)} and {tuple(v.shape)}")
    _att.check_token_count("q", t_len)
    _att.check_token_count(kn, k.shape[0])
    if k.shape[2] != dk:
        raise ValueError(f"q has head_dim {dk} but {kn} has {k.shape[2]} (only {vn} may differ: value_dim)")
    check_heads(hq, k.shape[1])
    check_dims("head_dim", dk)
    check_dims(f"{vn}'s value_dim", v.shape[2])
    if cu_seqlens_c.numel() != cu_seqlens.numel():
        raise ValueError(f"cu_seqlens_c must have one entry per entry of cu_seqlens ({cu_seqlens.numel()}), "
                         f"got {cu_seqlens_c.numel()}")
    batch = cu_seqlens.numel() - 1
    if t_len > 0 and batch > t_len:
        raise ValueError(f"cu_seqlens describes {batch} sequences for only {t_len} tokens")
    require_int("kernel_size", kernel_size, 1, MAX_KERNEL_SIZE)
    require_int("stride", stride, 1, kernel_size)
    check_scale(scale)
    check_selection(kernel_size, stride, top_k, block_size, init_blocks, local_blocks)
    if require_cuda:
        check_devices(tensors, q)


def _check_op(q, k, v, cu_seqlens, cu_seqlens_c, kernel_size, stride, scale, top_k, block_size, init_blocks,
              local_blocks):
    """check_arguments on the operators' encoding (scale 0.0 = 1/sqrt(Dk)): a direct
    torch.ops.fsa_jit.compressed_attention_* call gets compressed_attention's errors."""
    kernel_size, stride, top_k, block_size, init_blocks, local_blocks = (
        _att._example(x) for x in (kernel_size, stride, top_k, block_size, init_blocks, local_blocks))
    check_arguments(q, k, v, cu_seqlens, cu_seqlens_c, kernel_size, stride, scale or None, top_k, block_size,
                    init_blocks, local_blocks)


# ------------------------------------------------------------------- plans


class PlanCache:
    """The plans of one libfsa plan type (fsa_<kind>_plan_create / _destroy), by shape key.

    The key's first element is the device, its second whether the plan validates its calls (libfsa's check
    mode: a context of its own), its last whether the plan has the backward kernels; a plan is
    created once (under a lock, so concurrent first calls make one), and a forward-only lookup also takes
    the backward plan of the same shape. make_desc(key) returns (descriptor, objects it points to, kept
    alive during the creation)."""

    def __init__(self, kind, make_desc):
        self._kind = kind
        self._create, self._destroy = f"fsa_{kind}_plan_create", f"fsa_{kind}_plan_destroy"
        self._make_desc = make_desc
        self._lock = threading.Lock()
        self._plans = {}

    def get(self, lib, key):
        plan = self._plans.get(key)
        if plan is None and not key[-1]:
            plan = self._plans.get(key[:-1] + (True,))  # a backward plan also runs the forward
        if plan is not None:
            return plan
        with self._lock:
            plan = self._plans.get(key)
            if plan is None:
                _att.refuse_plan_in_capture(key[0], f"the {self._kind} attention")
                desc, _keep = self._make_desc(key)
                handle = ctypes.c_void_p()
                st = abi.function(lib, self._create)(ctypes.byref(handle), _att._context(lib, key[0], key[1]),
                                                     ctypes.byref(desc))
                lib.check(st, self._create)
                plan = self._plans[key] = handle.value
        return plan

    def clear(self):
        lib = _lib._library
        with self._lock:
            plans = list(self._plans.values())
            self._plans.clear()
            if lib is not None:
                for handle in plans:
                    abi.function(lib, self._destroy)(handle)

    def keys(self):
        return list(self._plans)


def _desc(key):
    _, _, dtype, dk, dv, hq, hkv, l, d, scale, top_k, bk, init, local, backward = key
    return abi.fsa_compressed_attention_desc(
        dtype=_att._DTYPES[dtype], head_dim=dk, value_dim=dv, num_q_heads=hq, num_kv_heads=hkv, kernel_size=l,
        stride=d, scale=scale, top_k=top_k, block_size=bk, init_blocks=init, local_blocks=local,
        backward=int(backward)), None


_plans = PlanCache("compressed", _desc)


def _get_plan(lib, key):
    """key: (device, validate, dtype, Dk, Dv, Hq, Hkv, l, d, scale, top_k, BK, init, local, backward)."""
    return _plans.get(lib, key)


def clear_plans():
    """Destroys the cached compressed-attention plans (a captured graph that used one must not replay)."""
    _plans.clear()


def cached_plans():
    """Keys of the cached plans: (device, validate, dtype, Dk, Dv, Hq, Hkv, kernel_size, stride, scale, top_k,
    block_size, init_blocks, local_blocks, backward)."""
    return _plans.keys()


def _workspace_bytes(lib, plan, name, t_len, batch):
    size = ctypes.c_size_t(0)
    lib.check(abi.function(lib, name)(ctypes.byref(size), plan, t_len, batch), name)
    return size.value


def _readable(t):
    """A kernel-readable view; a tensor without elements gets a small buffer (its pointer is never read past
    the counts, but must not be NULL)."""
    if t.numel() == 0:
        return torch.zeros((1,) + tuple(t.shape[1:]), dtype=t.dtype, device=t.device)
    return _att._kernel_ready(t)


# --------------------------------------------------------------- operators


def run_fwd(q, k, v, cu_seqlens, cu_seqlens_c, kernel_size, stride, scale, top_k, block_size, init_blocks,
            local_blocks, backward, validate, topk=None):
    """The forward operator's body: (o, lse, topk) of checked arguments, on the current stream; topk: the
    selection's output [T, Hkv, top_k] int32 (contiguous) or None to make one. Also called straight by the
    NSA layer's own autograd node (_nsa_node.py), which skips the dispatcher."""
    t_len, hq, dk = q.shape
    tc, hkv, dv = v.shape
    device = q.device
    with torch.cuda.device(device):
        o = torch.empty((t_len, hq, dv), dtype=q.dtype, device=device)
        lse = torch.empty((hq, t_len), dtype=torch.float32, device=device)
        if topk is None:
            topk = torch.empty((t_len, hkv, top_k), dtype=torch.int32, device=device)
        if t_len == 0:
            return o, lse, topk
        lib = _lib.get()
        key = (device.index, validate, q.dtype, dk, dv, hq, hkv, kernel_size, stride, _att._scale32(scale), top_k,
               block_size, init_blocks, local_blocks, backward)
        plan = _get_plan(lib, key)
        batch = cu_seqlens.numel() - 1
        ws, ws_ptr = _att._workspace(_workspace_bytes(lib, plan, "fsa_compressed_plan_workspace_size", t_len, batch),
                                     device)
        q, k, v = _att._kernel_ready(q), _readable(k), _readable(v)
        cu_seqlens, cu_seqlens_c = cu_seqlens.contiguous(), cu_seqlens_c.contiguous()
        args = abi.fsa_compressed_fwd_args(
            total_tokens=t_len, total_compressed=tc, batch=batch,
            q=_att._view(q), k=_att._view(k), v=_att._view(v), o=_att._view(o), lse=lse.data_ptr(),
            cu_seqlens=cu_seqlens.data_ptr(), cu_seqlens_c=cu_seqlens_c.data_ptr(),
            topk=_lib.fsa_tensor(topk.data_ptr() if top_k else 0, hkv * top_k, top_k),
            workspace=ws_ptr, workspace_bytes=0 if ws is None else ws.numel())
        st = abi.function(lib, "fsa_compressed_attention_fwd")(plan, ctypes.byref(args), _att._stream(device))
        lib.check(st, "fsa_compressed_attention_fwd")
    return o, lse, topk


@torch.library.custom_op("fsa_jit::compressed_attention_fwd", mutates_args=())
def _fwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, cu_seqlens_c: torch.Tensor,
            kernel_size: int, stride: int, scale: float, top_k: int, block_size: int, init_blocks: int,
            local_blocks: int, backward: bool, validate: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_op(q, k, v, cu_seqlens, cu_seqlens_c, kernel_size, stride, scale, top_k, block_size, init_blocks,
              local_blocks)
    return run_fwd(q, k, v, cu_seqlens, cu_seqlens_c, kernel_size, stride, scale, top_k, block_size, init_blocks,
                   local_blocks, backward, validate)


@_fwd_op.register_fake
def _fwd_fake(q, k, v, cu_seqlens, cu_seqlens_c, kernel_size, stride, scale, top_k, block_size, init_blocks,
              local_blocks, backward, validate):
    _check_op(q, k, v, cu_seqlens, cu_seqlens_c, kernel_size, stride, scale, top_k, block_size, init_blocks,
              local_blocks)
    t_len, hq, _ = q.shape
    return (q.new_empty((t_len, hq, v.shape[2])), q.new_empty((hq, t_len), dtype=torch.float32),
            q.new_empty((t_len, k.shape[1], top_k), dtype=torch.int32))


def run_bwd(dout, q, k, v, o, lse, cu_seqlens, cu_seqlens_c, kernel_size, stride, scale, top_k, block_size,
            init_blocks, local_blocks, validate, dq_into=None, gate=None, gate_grad=None):
    """The backward operator's body: (dq, dk, dv) on the current stream (see run_fwd). dq_into: None, or a
    contiguous tensor of q's shape and dtype that the branch's dq is added to in place before its rounding
    (fsa_compressed_bwd_args.dq_add) and that is returned as dq (the NSA layer's sum over branches). gate,
    gate_grad: None, or float32 [T, Hq] tensors, as window.run_bwd's."""
    t_len, hq, dk = q.shape
    tc, hkv, dv = v.shape
    device = q.device
    with torch.cuda.device(device):
        dq = torch.empty(q.shape, dtype=q.dtype, device=device) if dq_into is None else dq_into
        dk_ = torch.empty(k.shape, dtype=k.dtype, device=device)
        dv_ = torch.empty(v.shape, dtype=v.dtype, device=device)
        if t_len == 0 or tc == 0:  # nothing is visible: every gradient is 0
            if gate_grad is not None and t_len:  # rowsum(dout * o), as the kernels would write it
                gate_grad.copy_((dout.float() * o.float()).sum(2))
            return (dq.zero_() if dq_into is None else dq), dk_.zero_(), dv_.zero_()
        lib = _lib.get()
        key = (device.index, validate, q.dtype, dk, dv, hq, hkv, kernel_size, stride, _att._scale32(scale), top_k,
               block_size, init_blocks, local_blocks, True)
        plan = _get_plan(lib, key)
        batch = cu_seqlens.numel() - 1
        ws, ws_ptr = _att._workspace(
            _workspace_bytes(lib, plan, "fsa_compressed_plan_workspace_size_bwd", t_len, batch), device)
        q, k, v, o, dout = (_att._kernel_ready(x) for x in (q, k, v, o, dout))
        lse, cu_seqlens, cu_seqlens_c = lse.contiguous(), cu_seqlens.contiguous(), cu_seqlens_c.contiguous()
        args = abi.fsa_compressed_bwd_args(
            total_tokens=t_len, total_compressed=tc, batch=batch,
            q=_att._view(q), k=_att._view(k), v=_att._view(v), o=_att._view(o), dout=_att._view(dout),
            dq=_att._view(dq), dk=_att._view(dk_), dv=_att._view(dv_), lse=lse.data_ptr(),
            cu_seqlens=cu_seqlens.data_ptr(), cu_seqlens_c=cu_seqlens_c.data_ptr(),
            workspace=ws_ptr, workspace_bytes=0 if ws is None else ws.numel(),
            gate=_att._float_view(gate), gate_grad=_att._float_view(gate_grad))
        if dq_into is not None:
            args.dq_add = args.dq  # dq itself: each element read before it is written
        st = abi.function(lib, "fsa_compressed_attention_bwd")(plan, ctypes.byref(args), _att._stream(device))
        lib.check(st, "fsa_compressed_attention_bwd")
    return dq, dk_, dv_


def _check_bwd(dout, q, k, v, o, lse, cu_seqlens, cu_seqlens_c, kernel_size, stride, scale, top_k, block_size,
               init_blocks, local_blocks):
    _check_op(q, k, v, cu_seqlens, cu_seqlens_c, kernel_size, stride, scale, top_k, block_size, init_blocks,
              local_blocks)
    _att.check_backward_operands(q, v, o, lse, dout)


@torch.library.custom_op("fsa_jit::compressed_attention_bwd", mutates_args=())
def _bwd_op(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
            lse: torch.Tensor, cu_seqlens: torch.Tensor, cu_seqlens_c: torch.Tensor, kernel_size: int, stride: int,
            scale: float, top_k: int, block_size: int, init_blocks: int, local_blocks: int,
            validate: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_bwd(dout, q, k, v, o, lse, cu_seqlens, cu_seqlens_c, kernel_size, stride, scale, top_k, block_size,
               init_blocks, local_blocks)
    return run_bwd(dout, q, k, v, o, lse, cu_seqlens, cu_seqlens_c, kernel_size, stride, scale, top_k, block_size,
                   init_blocks, local_blocks, validate)


@_bwd_op.register_fake
def _bwd_fake(dout, q, k, v, o, lse, cu_seqlens, cu_seqlens_c, kernel_size, stride, scale, top_k, block_size,
              init_blocks, local_blocks, validate):
    _check_bwd(dout, q, k, v, o, lse, cu_seqlens, cu_seqlens_c, kernel_size, stride, scale, top_k, block_size,
               init_blocks, local_blocks)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, cu_seqlens, cu_seqlens_c, kernel_size, stride, scale, top_k, block_size, init, local, _, validate = inputs
    o, lse, topk = output
    ctx.save_for_backward(q, k, v, o, lse, cu_seqlens, cu_seqlens_c)
    ctx.call = (kernel_size, stride, scale, top_k, block_size, init, local, validate)
    ctx.mark_non_differentiable(lse, topk)


def _backward(ctx, do, _dlse, _dtopk):
    q, k, v, o, lse, cu_seqlens, cu_seqlens_c = ctx.saved_tensors
    dq, dk, dv = torch.ops.fsa_jit.compressed_attention_bwd(do, q, k, v, o, lse, cu_seqlens, cu_seqlens_c, *ctx.call)
    need = ctx.needs_input_grad
    return (dq if need[0] else None, dk if need[1] else None, dv if need[2] else None) + (None,) * 11


_fwd_op.register_autograd(_backward, setup_context=_setup_context)


def compressed_attention(q, k, v, cu_seqlens, cu_seqlens_c, kernel_size=32, stride=16, scale=None, top_k=0,
                         block_size=64, init_blocks=1, local_blocks=2, validate=False):
    """NSA's compressed attention over a packed varlen batch, and optionally the block selection it drives.

    q [T, Hq, Dk]; k [Tc, Hkv, Dk] and v [Tc, Hkv, Dv], the compressed keys and values the caller made with
    kernel size `kernel_size` (l) and stride `stride` (d) per sequence (fsa_jit.nsa.compress_mean is one such
    compression): fp16 or bf16 on one CUDA device, any strides (a tensor libfsa cannot read in place, such as
    one whose last dim is not contiguous, is copied). cu_seqlens: int32 [B + 1], the query
    tokens of each sequence; cu_seqlens_c: int32 [B + 1], its compressed tokens. Compressed token j of a
    sequence covers positions j*d .. j*d + l - 1 and is visible to position t when j*d + l - 1 <= t.
    Group Hq / Hkv up to 16; Dk and Dv multiples of 16 up to 256. scale: None = 1/sqrt(Dk).

    kernel_size 1..4096, stride 1..kernel_size. top_k (0..64) > 0 also selects, per KV head and query token,
    top_k blocks of `block_size` positions (a multiple of stride, block_size / stride a power of two up to 64;
    (kernel_size - 1) // stride at most 64): block c scores the sum over the group's query heads
    and over the compressed tokens overlapping positions c*BK .. c*BK + BK - 1 of their attention
    probabilities; the first `init_blocks` blocks and the `local_blocks` blocks ending at the token's own
    block are always taken, equal scores go to the lower block. The rows are ascending, -1 after the
    selected blocks, in the layout fsa_jit.selected_attention reads (topk_layout='thk').

    validate: libfsa's check mode: a kernel first checks cu_seqlens and cu_seqlens_c on the device (each
    starts at 0, never falls and ends at T / Tc; each sequence of n tokens has exactly
    max(0, (n - kernel_size) // stride + 1) compressed tokens), in the forward and the backward, and bad
    offsets raise fsa_jit.FsaError naming what and where instead of giving a silent wrong answer. Each call
    then waits for the check (a host synchronization); under CUDA graph capture the check is skipped.

    Returns (o [T, Hq, Dv] in q's dtype, lse [Hq, T] float32 natural log, -inf where no compressed token is
    visible, where o is 0), plus topk [T, Hkv, top_k] int32 when top_k > 0. Differentiable with respect to
    q, k and v, once (differentiating the gradients raises); lse and topk carry no gradient.
    """
    _att._check_flag("validate", validate)
    check_arguments(q, k, v, cu_seqlens, cu_seqlens_c, kernel_size, stride, scale, top_k, block_size, init_blocks,
                    local_blocks)
    if not top_k:  # the selection's parameters do not matter: one plan for every spelling
        block_size, init_blocks, local_blocks = 64, 1, 2
    needs_backward = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    o, lse, topk = torch.ops.fsa_jit.compressed_attention_fwd(
        q, k, v, cu_seqlens, cu_seqlens_c, int(kernel_size), int(stride), 0.0 if scale is None else float(scale),
        int(top_k), int(block_size), int(init_blocks), int(local_blocks), needs_backward, bool(validate))
    return (o, lse, topk) if top_k else (o, lse)
