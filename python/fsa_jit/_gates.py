"""libfsa's gate kernels (fsa_gate_fwd / _bwd) called from Python: o = g_cmp o_cmp + g_sel o_sel + g_win o_win
in one pass over the three outputs (fp32 sums, one rounding), and in the backward the three g_x dout and the
gates' gradients rowsum(dout o_x) in one more. The bodies of nsa.py's gate operators, also called straight
by the NSA layer's own autograd node (_nsa_node.py)."""

import ctypes
import numbers

import torch

from . import _lib
from . import _nsa_abi as abi
from . import attention as _att
from . import compressed as _cmp


def check(name, g, t_len, hq, device):
    """Checks a gate (a number, or a tensor: of one or two dims broadcastable to [T, Hq], of three to
    [T, Hq, 1]; TypeError, ValueError);
    True when it is a tensor of exactly [T, Hq] or [T, Hq, 1] (one value per row: no broadcast)."""
    if isinstance(g, numbers.Real) and not isinstance(g, bool):
        return False
    if not isinstance(g, torch.Tensor):
        raise TypeError(f"{name} must be a tensor broadcastable to [T, Hq] or a number, got {type(g).__name__}")
    _att._check_dense(name, g)
    if not g.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {g.dtype}")
    shape = tuple(g.shape) + (1,) if g.dim() <= 2 else tuple(g.shape)
    rows = shape == (t_len, hq, 1)
    if rows:  # the common case, without broadcast_shapes' trip through Python
        ok = True
    else:
        try:
            ok = len(shape) <= 3 and torch.broadcast_shapes(shape, (t_len, hq, 1)) == (t_len, hq, 1)
        except RuntimeError:
            ok = False
    if not ok:
        raise ValueError(f"{name} has shape {tuple(g.shape)}: a gate of one or two dims must broadcast to [T, Hq] = "
                         f"[{t_len}, {hq}], one of three dims to [T, Hq, 1]")
    if g.numel() > 1 and g.device != device:
        raise ValueError(f"{name} is on {g.device} but q is on {device}")
    return rows and g.device == device


def check_operands(outs, gates, dout=None):
    """Checks the gate operators' tensors (TypeError, ValueError): the branches' outputs o_cmp, o_sel, o_win (and
    dout) fp16 or bf16 [T, Hq, Dv] of one dtype and shape, the gates float32 [T, Hq] (any strides, as view()
    makes them), all on one CUDA device. nsa_attention passes them so; a direct torch.ops.fsa_jit.nsa_gate_*
    call gets these errors."""
    rows = list(zip(("o_cmp", "o_sel", "o_win"), outs)) + ([("dout", dout)] if dout is not None else [])
    named_gates = list(zip(("g_cmp", "g_sel", "g_win"), gates))
    for name, t in rows + named_gates:
        _att._check_tensor(name, t)
    o = outs[0]
    if o.dtype not in _att._DTYPES:
        raise TypeError(f"o_cmp must be torch.float16 or torch.bfloat16, got {o.dtype}")
    if o.dim() != 3:
        raise ValueError(f"o_cmp must be 3-D [T, Hq, Dv], got shape {tuple(o.shape)}")
    _cmp.check_dims("o_cmp's value head dim", o.shape[2])  # libfsa's gate plans take these only
    for name, t in rows[1:]:
        if t.dtype != o.dtype:
            raise TypeError(f"{name} must have o_cmp's dtype {o.dtype}, got {t.dtype}")
        if t.shape != o.shape:
            raise ValueError(f"{name} must have o_cmp's shape {tuple(o.shape)}, got {tuple(t.shape)}")
    t_len, hq, _ = o.shape
    for name, g in named_gates:
        if g.dtype != torch.float32:  # read as float32 whatever it holds
            raise TypeError(f"{name} must be torch.float32 (the operators take the gates as float32 [T, Hq]), got "
                            f"{g.dtype}")
        if tuple(g.shape) != (t_len, hq):
            raise ValueError(f"{name} must be [T, Hq] = [{t_len}, {hq}], got shape {tuple(g.shape)}")
    _cmp.check_devices(rows + named_gates, o, "o_cmp")


def view(g, t_len, hq, device):
    """A checked gate as a float32 [T, Hq] view (a number or a broadcast gate repeats through zero strides)."""
    return as_rows(g, device).expand(t_len, hq)


def as_rows(g, device):
    """A checked gate as float32 [T, Hq] (or a broadcastable shape for broadcast gates): a number becomes a
    one-element tensor, a tensor is cast (a differentiable cast when it needs gradients)."""
    if not isinstance(g, torch.Tensor):
        return torch.full((1, 1), float(g), dtype=torch.float32, device=device)
    rows = g[..., 0] if g.dim() == 3 else g
    return rows.to(device=device, dtype=torch.float32)


def _desc(key):
    _, _, dtype, dv, _ = key
    return abi.fsa_gate_desc(dtype=_att._DTYPES[dtype], value_dim=dv), None


_plans = _cmp.PlanCache("gate", _desc)


def clear_plans():
    """Destroys the cached gate plans (a captured graph that used one must not replay)."""
    _plans.clear()


def _args(outs, gates, t_len, hq):
    a = abi.fsa_gate_args(total_tokens=t_len, num_heads=hq)
    for x in range(3):
        a.out[x] = _att._view(outs[x])
        a.gate[x] = _att._float_view(gates[x])
    return a


def _call(name, outs, gates, fill):
    """One gate kernel over [T, Hq, Dv] rows on the current stream; fill(args) sets the operation's own
    fields."""
    t_len, hq, dv = outs[0].shape
    device = outs[0].device
    with torch.cuda.device(device):
        lib = _lib.get()
        plan = _plans.get(lib, (device.index, False, outs[0].dtype, dv, True))
        a = _args(outs, gates, t_len, hq)
        fill(a)
        lib.check(abi.function(lib, name)(plan, ctypes.byref(a), _att._stream(device)), name)


def run_fwd(o_cmp, o_sel, o_win, g_cmp, g_sel, g_win):
    """o [T, Hq, Dv] in the outputs' dtype; the gates float32 [T, Hq] views (any strides)."""
    o = torch.empty(o_cmp.shape, dtype=o_cmp.dtype, device=o_cmp.device)
    if o.numel():
        outs = [_att._kernel_ready(t) for t in (o_cmp, o_sel, o_win)]
        _call("fsa_gate_fwd", outs, (g_cmp, g_sel, g_win), lambda a: setattr(a, "o", _att._view(o)))
    return o


def run_bwd(dout, o_cmp, o_sel, o_win, g_cmp, g_sel, g_win):
    """(dout_cmp, dout_sel, dout_win [T, Hq, Dv], dgate float32 [3, T, Hq])."""
    t_len, hq, _ = o_cmp.shape
    douts = [torch.empty(o_cmp.shape, dtype=o_cmp.dtype, device=o_cmp.device) for _ in range(3)]
    dgate = torch.empty((3, t_len, hq), dtype=torch.float32, device=o_cmp.device)
    if dgate.numel() and o_cmp.shape[2]:
        outs = [_att._kernel_ready(t) for t in (o_cmp, o_sel, o_win)]
        dout = _att._kernel_ready(dout)

        def fill(a):
            a.dout = _att._view(dout)
            for x in range(3):
                a.dout_branch[x] = _att._view(douts[x])
            a.dgate = dgate.data_ptr()

        _call("fsa_gate_bwd", outs, (g_cmp, g_sel, g_win), fill)
    return douts[0], douts[1], douts[2], dgate
