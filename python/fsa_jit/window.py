"""window_attention: NSA's sliding-window branch (libfsa's fsa_window_*) as a PyTorch custom operator.

The query at position i of its sequence attends to the keys at positions
i - window + 1 .. i of the same sequence (causal attention when the window
covers the sequence). Registered as fsa_jit::window_attention_fwd with a
fake implementation, so torch.compile and CUDA graphs (after a first eager
call made the plan) use it. No host synchronisation, except with
validate=True.
"""

import ctypes
import threading

import torch

from . import _lib
from . import _nsa_abi as abi
from . import attention as _att
from . import compressed as _cmp

_lock = threading.Lock()
_plans = {}  # (device, dtype, Dk, Dv, Hq, Hkv, window, scale) -> handle


def check_arguments(q, k, v, cu_seqlens, window, scale=None, require_cuda=True):
    """Checks window_attention's arguments without touching a device or libfsa (TypeError, ValueError)."""
    tensors = (("q", q), ("k", k), ("v", v), ("cu_seqlens", cu_seqlens))
    _cmp.check_common(tensors, q, ("cu_seqlens",), require_cuda)
    t_len, hq, dk = q.shape
    if k.shape[:2] != v.shape[:2]:
        raise ValueError(f"k and v must have the same [T, Hkv], got {tuple(k.shape)} and {tuple(v.shape)}")
    if k.shape[0] != t_len:
        raise ValueError(f"q has T={t_len} tokens but k and v have {k.shape[0]}: all are packed over the same tokens")
    if k.shape[2] != dk:
        raise ValueError(f"q has head_dim {dk} but k has {k.shape[2]} (only v may differ: value_dim)")
    _cmp.check_heads(hq, k.shape[1])
    _cmp.check_dims("head_dim", dk)
    _cmp.check_dims("value_dim", v.shape[2])
    batch = cu_seqlens.numel() - 1
    if t_len > 0 and batch > t_len:
        raise ValueError(f"cu_seqlens describes {batch} sequences for only {t_len} tokens")
    _cmp.require_int("window", window, 1, 2**31 - 1)
    _cmp.check_scale(scale)
    if require_cuda:
        _cmp.check_devices(tensors, q)


def _get_plan(lib, key):
    plan = _plans.get(key)
    if plan is not None:
        return plan
    with _lock:
        plan = _plans.get(key)
        if plan is None:
            device, dtype, dk, dv, hq, hkv, window, scale = key
            desc = abi.fsa_window_attention_desc(dtype=_att._DTYPES[dtype], head_dim=dk, value_dim=dv,
                                                 num_q_heads=hq, num_kv_heads=hkv, window=window, scale=scale)
            handle = ctypes.c_void_p()
            st = abi.function(lib, "fsa_window_plan_create")(ctypes.byref(handle), _att._context(lib, device),
                                                              ctypes.byref(desc))
            lib.check(st, "fsa_window_plan_create")
            plan = _plans[key] = handle.value
    return plan


def clear_plans():
    """Destroys the cached window plans (a captured graph that used one must not replay)."""
    lib = _lib._library
    with _lock:
        plans = list(_plans.values())
        _plans.clear()
        if lib is not None:
            for handle in plans:
                abi.function(lib, "fsa_window_plan_destroy")(handle)


def cached_plans():
    """Keys of the cached plans: (device, dtype, Dk, Dv, Hq, Hkv, window, scale)."""
    return list(_plans)


@torch.library.custom_op("fsa_jit::window_attention_fwd", mutates_args=())
def _fwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, window: int, scale: float,
            validate: bool) -> tuple[torch.Tensor, torch.Tensor]:
    t_len, hq, dk = q.shape
    hkv, dv = v.shape[1], v.shape[2]
    device = q.device
    with torch.cuda.device(device):
        o = torch.empty((t_len, hq, dv), dtype=q.dtype, device=device)
        lse = torch.empty((hq, t_len), dtype=torch.float32, device=device)
        if t_len == 0:
            return o, lse
        if validate and not _cmp._capturing():
            _cmp.validate_offsets("cu_seqlens", cu_seqlens, t_len)
        lib = _lib.get()
        plan = _get_plan(lib, (device.index, q.dtype, dk, dv, hq, hkv, window, _att._scale32(scale)))
        q, k, v = (_att._kernel_ready(x) for x in (q, k, v))
        cu_seqlens = cu_seqlens.contiguous()
        args = abi.fsa_window_fwd_args(total_tokens=t_len, batch=cu_seqlens.numel() - 1, q=_att._view(q),
                                       k=_att._view(k), v=_att._view(v), o=_att._view(o),
                                       cu_seqlens=cu_seqlens.data_ptr(), lse=lse.data_ptr())
        st = abi.function(lib, "fsa_window_attention_fwd")(plan, ctypes.byref(args), _att._stream(device))
        lib.check(st, "fsa_window_attention_fwd")
    return o, lse


@_fwd_op.register_fake
def _fwd_fake(q, k, v, cu_seqlens, window, scale, validate):
    t_len, hq, _ = q.shape
    return q.new_empty((t_len, hq, v.shape[2])), q.new_empty((hq, t_len), dtype=torch.float32)


def _setup_context(ctx, inputs, output):
    ctx.mark_non_differentiable(output[1])


def _backward(ctx, do, _dlse):
    raise RuntimeError("window_attention: this version of libfsa has no sliding-window backward "
                       "(fsa_window_attention_bwd); only the forward can run")


_fwd_op.register_autograd(_backward, setup_context=_setup_context)


def window_attention(q, k, v, cu_seqlens, window, scale=None, return_lse=False, validate=False):
    """Sliding-window attention over a packed varlen batch.

    q [T, Hq, Dk], k [T, Hkv, Dk], v [T, Hkv, Dv]: fp16 or bf16 on one CUDA device, last dim contiguous;
    group Hq / Hkv up to 16; Dk and Dv multiples of 16 up to 256. cu_seqlens: int32 [B + 1]. The query at
    position i of its sequence sees keys i - window + 1 .. i. scale: None = 1/sqrt(Dk). validate: check
    cu_seqlens on the host first (one host synchronization; skipped under CUDA graph capture).

    Returns o [T, Hq, Dv] in q's dtype, and lse [Hq, T] float32 (natural log) when return_lse.
    """
    check_arguments(q, k, v, cu_seqlens, window, scale)
    o, lse = torch.ops.fsa_jit.window_attention_fwd(q, k, v, cu_seqlens, int(window),
                                                    0.0 if scale is None else float(scale), bool(validate))
    return (o, lse) if return_lse else o
