"""window_attention: NSA's sliding-window branch (libfsa's fsa_window_*) as a PyTorch custom operator.

The query at position i of its sequence, in query head qh, attends to the
keys at positions i - W_qh + 1 .. i of the same sequence (causal attention
when the window covers the sequence); W is one window for every head or one
per query head. Registered as fsa_jit::window_attention_fwd and
fsa_jit::window_attention_bwd with fake implementations and an autograd
formula, so eager mode, autograd, torch.compile and CUDA graphs (after a
first eager call made the plan) use the same two operators. No host
synchronisation, except with validate=True (libfsa's check mode). The
operators and their fake implementations run window_attention's checks on
their own encoding (window 0 with one window per head in head_windows, scale
0.0 for the default), the backward also those of o, lse and dout: metadata
only; cu_seqlens' values are checked by validate=True.
"""

import ctypes
import numbers

import torch

from . import _lib
from . import _nsa_abi as abi
from . import attention as _att
from . import compressed as _cmp

def windows_read_once(window):
    """A 1-D tensor of windows as a tuple of its values (one host read, a synchronization when it is on the
    GPU), so that the checks and the call read that tuple; anything else as it is."""
    if isinstance(window, torch.Tensor):
        _att._check_host_readable("window", window)
        if window.dim() == 1:
            return tuple(window.tolist())
    return window


def head_windows_of(window, hq):
    """(window, head windows) from an int, or a list, tuple or 1-D tensor of Hq ints: (W, ()) or
    (0, (W_0, .., W_Hq-1))."""
    if isinstance(window, (list, tuple)) or (isinstance(window, torch.Tensor) and window.dim() == 1):
        values = window.tolist() if isinstance(window, torch.Tensor) else list(window)
        if len(values) != hq:
            raise ValueError(f"per-head windows: one per query head ({hq}), got {len(values)}")
        if hq > abi.MAX_HEAD_WINDOWS:
            raise ValueError(f"per-head windows take at most {abi.MAX_HEAD_WINDOWS} query heads, got {hq}")
        for i, w in enumerate(values):
            _cmp.require_int(f"window[{i}]", w, 1, 2**31 - 1)
        return 0, tuple(int(w) for w in values)
    if not isinstance(window, numbers.Integral):  # isinstance, not hasattr: it traces under torch.compile
        raise TypeError(f"window must be an int, or a list, tuple or 1-D tensor of Hq ints, got {type(window).__name__}")
    _cmp.require_int("window", window, 1, 2**31 - 1)
    return int(window), ()


def check_arguments(q, k, v, cu_seqlens, window, scale=None, require_cuda=True, names=("k", "v")):
    """Checks window_attention's arguments without touching a device or libfsa (TypeError, ValueError).
    names: what the messages call k and v (the NSA layer passes its k_win and v_win)."""
    kn, vn = names
    tensors = (("q", q), (kn, k), (vn, v), ("cu_seqlens", cu_seqlens))
    _cmp.check_common(tensors, q, ("cu_seqlens",))
    t_len, hq, dk = q.shape
    if k.shape[:2] != v.shape[:2]:
        raise ValueError(f"{kn} and {vn} must have the same [T, Hkv], got {tuple(k.shape)} and {tuple(v.shape)}")
    if k.shape[0] != t_len:
        raise ValueError(f"q has T={t_len} tokens but {kn} and {vn} have {k.shape[0]}: all are packed over the same "
                         "tokens")
    _att.check_token_count("q", t_len)
    if k.shape[2] != dk:
        raise ValueError(f"q has head_dim {dk} but {kn} has {k.shape[2]} (only {vn} may differ: value_dim)")
    _cmp.check_heads(hq, k.shape[1])
    _cmp.check_dims("head_dim", dk)
    _cmp.check_dims(f"{vn}'s value_dim", v.shape[2])
    batch = cu_seqlens.numel() - 1
    if t_len > 0 and batch > t_len:
        raise ValueError(f"cu_seqlens describes {batch} sequences for only {t_len} tokens")
    head_windows_of(window, hq)
    _cmp.check_scale(scale)
    if require_cuda:
        _cmp.check_devices(tensors, q)


def _check_op(q, k, v, cu_seqlens, window, head_windows, scale):
    """check_arguments on the operators' encoding ((W, []) or (0, [W_0, .., W_Hq-1]); scale 0.0 =
    1/sqrt(Dk)): a direct torch.ops.fsa_jit.window_attention_* call gets window_attention's errors."""
    window = _att._example(window)
    if len(head_windows):
        if window != 0:
            raise ValueError(f"window must be 0 when head_windows gives one window per query head, got {window}")
        window = [_att._example(w) for w in head_windows]
    check_arguments(q, k, v, cu_seqlens, window, scale or None)


def _check_bwd(dout, q, k, v, o, lse, cu_seqlens, window, head_windows, scale):
    _check_op(q, k, v, cu_seqlens, window, head_windows, scale)
    _att.check_backward_operands(q, v, o, lse, dout)


def _desc(key):
    _, _, dtype, dk, dv, hq, hkv, window, head_windows, scale, backward = key
    desc = abi.fsa_window_attention_desc(dtype=_att._DTYPES[dtype], head_dim=dk, value_dim=dv, num_q_heads=hq,
                                         num_kv_heads=hkv, window=window or 1, scale=scale, backward=int(backward))
    per_head = (ctypes.c_int32 * hq)(*head_windows) if head_windows else None
    if per_head is not None:
        desc.head_windows = ctypes.cast(per_head, ctypes.POINTER(ctypes.c_int32))
    return desc, per_head


_plans = _cmp.PlanCache("window", _desc)


def _get_plan(lib, key):
    return _plans.get(lib, key)


def clear_plans():
    """Destroys the cached window plans (a captured graph that used one must not replay)."""
    _plans.clear()


def cached_plans():
    """Keys of the cached plans: (device, validate, dtype, Dk, Dv, Hq, Hkv, window, head windows, scale,
    backward)."""
    return _plans.keys()


def _key(q, k, v, window, head_windows, scale, backward, validate):
    return (q.device.index, validate, q.dtype, q.shape[2], v.shape[2], q.shape[1], k.shape[1], window,
            tuple(head_windows), _att._scale32(scale), backward)


def run_fwd(q, k, v, cu_seqlens, window, head_windows, scale, backward, validate):
    """The forward operator's body: (o, lse) of checked arguments, on the current stream. Also called
    straight by the NSA layer's own autograd node (_nsa_node.py), which skips the dispatcher."""
    t_len, hq, dk = q.shape
    dv = v.shape[2]
    device = q.device
    with torch.cuda.device(device):
        o = torch.empty((t_len, hq, dv), dtype=q.dtype, device=device)
        lse = torch.empty((hq, t_len), dtype=torch.float32, device=device)
        if t_len == 0:
            return o, lse
        lib = _lib.get()
        plan = _get_plan(lib, _key(q, k, v, window, head_windows, scale, backward, validate))
        q, k, v = (_att._kernel_ready(x) for x in (q, k, v))
        cu_seqlens = cu_seqlens.contiguous()
        args = abi.fsa_window_fwd_args(total_tokens=t_len, batch=cu_seqlens.numel() - 1, q=_att._view(q),
                                       k=_att._view(k), v=_att._view(v), o=_att._view(o),
                                       cu_seqlens=cu_seqlens.data_ptr(), lse=lse.data_ptr())
        st = abi.function(lib, "fsa_window_attention_fwd")(plan, ctypes.byref(args), _att._stream(device))
        lib.check(st, "fsa_window_attention_fwd")
    return o, lse


@torch.library.custom_op("fsa_jit::window_attention_fwd", mutates_args=())
def _fwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, window: int,
            head_windows: list[int], scale: float, backward: bool,
            validate: bool) -> tuple[torch.Tensor, torch.Tensor]:
    _check_op(q, k, v, cu_seqlens, window, head_windows, scale)
    return run_fwd(q, k, v, cu_seqlens, window, head_windows, scale, backward, validate)


@_fwd_op.register_fake
def _fwd_fake(q, k, v, cu_seqlens, window, head_windows, scale, backward, validate):
    _check_op(q, k, v, cu_seqlens, window, head_windows, scale)
    t_len, hq, _ = q.shape
    return q.new_empty((t_len, hq, v.shape[2])), q.new_empty((hq, t_len), dtype=torch.float32)


def run_bwd(dout, q, k, v, o, lse, cu_seqlens, window, head_windows, scale, validate, gate=None, gate_grad=None):
    """The backward operator's body: (dq, dk, dv) on the current stream (see run_fwd). gate: None, or the
    float32 [T, Hq] gate (any strides) that multiplies o in the caller's gated sum, dout being that sum's
    gradient (fsa_window_bwd_args.gate); gate_grad: None, or a float32 [T, Hq] tensor written with
    rowsum(dout * o), the gate's gradient."""
    t_len = q.shape[0]
    device = q.device
    with torch.cuda.device(device):
        dq = torch.empty(q.shape, dtype=q.dtype, device=device)
        dk = torch.empty(k.shape, dtype=k.dtype, device=device)
        dv = torch.empty(v.shape, dtype=v.dtype, device=device)
        if t_len == 0:
            return dq, dk, dv
        lib = _lib.get()
        plan = _get_plan(lib, _key(q, k, v, window, head_windows, scale, True, validate))
        batch = cu_seqlens.numel() - 1
        size = ctypes.c_size_t(0)
        st = abi.function(lib, "fsa_window_plan_workspace_size_bwd")(ctypes.byref(size), plan, t_len, batch)
        lib.check(st, "fsa_window_plan_workspace_size_bwd")
        ws, ws_ptr = _att._workspace(size.value, device)
        q, k, v, o, dout = (_att._kernel_ready(x) for x in (q, k, v, o, dout))
        lse, cu_seqlens = lse.contiguous(), cu_seqlens.contiguous()
        args = abi.fsa_window_bwd_args(
            total_tokens=t_len, batch=batch, q=_att._view(q), k=_att._view(k), v=_att._view(v), o=_att._view(o),
            dout=_att._view(dout), dq=_att._view(dq), dk=_att._view(dk), dv=_att._view(dv), lse=lse.data_ptr(),
            cu_seqlens=cu_seqlens.data_ptr(), workspace=ws_ptr, workspace_bytes=0 if ws is None else ws.numel(),
            gate=_att._float_view(gate), gate_grad=_att._float_view(gate_grad))
        st = abi.function(lib, "fsa_window_attention_bwd")(plan, ctypes.byref(args), _att._stream(device))
        lib.check(st, "fsa_window_attention_bwd")
    return dq, dk, dv


@torch.library.custom_op("fsa_jit::window_attention_bwd", mutates_args=())
def _bwd_op(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
            lse: torch.Tensor, cu_seqlens: torch.Tensor, window: int, head_windows: list[int], scale: float,
            validate: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_bwd(dout, q, k, v, o, lse, cu_seqlens, window, head_windows, scale)
    return run_bwd(dout, q, k, v, o, lse, cu_seqlens, window, head_windows, scale, validate)


@_bwd_op.register_fake
def _bwd_fake(dout, q, k, v, o, lse, cu_seqlens, window, head_windows, scale, validate):
    _check_bwd(dout, q, k, v, o, lse, cu_seqlens, window, head_windows, scale)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, cu_seqlens, window, head_windows, scale, _, validate = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, cu_seqlens)
    ctx.call = (window, head_windows, scale, validate)
    ctx.mark_non_differentiable(lse)


def _backward(ctx, do, _dlse):
    q, k, v, o, lse, cu_seqlens = ctx.saved_tensors
    dq, dk, dv = torch.ops.fsa_jit.window_attention_bwd(do, q, k, v, o, lse, cu_seqlens, *ctx.call)
    need = ctx.needs_input_grad
    return (dq if need[0] else None, dk if need[1] else None, dv if need[2] else None) + (None,) * 6


_fwd_op.register_autograd(_backward, setup_context=_setup_context)


def window_attention(q, k, v, cu_seqlens, window, scale=None, return_lse=False, validate=False):
    """Sliding-window attention over a packed varlen batch.

    q [T, Hq, Dk], k [T, Hkv, Dk], v [T, Hkv, Dv]: fp16 or bf16 on one CUDA device, any strides
    (a tensor libfsa cannot read in place, such as one whose last dim is not contiguous, is copied); group
    Hq / Hkv up to 16; Dk and Dv multiples of 16 up to 256. cu_seqlens: int32 [B + 1].
    window: an int W, or a list, tuple or 1-D tensor of Hq ints (one window per query head; at most 256 heads): the query at
    position i of its sequence, in query head qh, sees keys i - W_qh + 1 .. i. A 1-D tensor of Hq windows is
    taken too, but its values are read on the host at every call (.tolist(): a host synchronization, which
    no CUDA graph capture allows, when it is on the GPU); pass a list or tuple. scale: None = 1/sqrt(Dk).
    validate: libfsa's check mode: a kernel first checks cu_seqlens on the device (starts at 0, never
    falls, ends at T), in the forward and the backward, and bad offsets raise fsa_jit.FsaError naming what
    and where instead of leaving tokens unwritten. Each call then waits for the check (a host
    synchronization); under CUDA graph capture the check is skipped.

    Returns o [T, Hq, Dv] in q's dtype, and lse [Hq, T] float32 (natural log) when return_lse.
    Differentiable with respect to q, k and v, once (differentiating the gradients raises); lse carries no
    gradient.
    """
    window = windows_read_once(window)
    _att._check_flag("validate", validate)
    _att._check_flag("return_lse", return_lse)
    check_arguments(q, k, v, cu_seqlens, window, scale)
    window, head_windows = head_windows_of(window, q.shape[1])
    needs_backward = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    o, lse = torch.ops.fsa_jit.window_attention_fwd(q, k, v, cu_seqlens, window, list(head_windows),
                                                    0.0 if scale is None else float(scale), needs_backward,
                                                    bool(validate))
    return (o, lse) if return_lse else o
