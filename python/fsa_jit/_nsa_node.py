"""The NSA layer's eager path: the whole layer as one autograd node that calls the branches straight.

Why: through the operators, the layer is four forward and four backward trips through the dispatcher, each
with its own autograd node, argument checks and structures, and the GPU waits for whatever the host does
before the first kernel of a pass (at T 8192 on an H200: the checks, three gate casts and the first branch's
call, ~0.45 ms before the compressed forward started; bench/NOTES.md "node"). Here:
- A call whose key (call_key: the tensors' layouts, the gates' kinds, the parameters and their types, the
  grad mode) was checked before skips nsa_attention's checks; what can differ between such calls is checked
  per call (the selected attention's entry: cu_seqlens' length, pointer alignment).
- The branches' bodies (the same functions the operators run) are called straight, the selected attention
  through its fast-path entry (_fast.py).
- Gates of one value per row ([T, Hq] or [T, Hq, 1] tensors) are cast to float32 inside the node, after the
  branches' kernels are queued; their gradients come back in their own dtype and shape.
- The backward runs the window, compressed and selected branches in that order, each on the layer's dout
  with its gate (the branches' `gate` and `gate_grad` arguments: the gate enters each branch's probabilities,
  and the gate's gradient rowsum(dout * o_x) comes from the same pass), so no gated dout is ever formed; the
  gradient of q is summed in that order too, in one tensor and with no pass of its own: the window's dq, to
  which the compressed branch and then the selected attention add theirs in place before rounding
  (fsa_compressed_bwd_args.dq_add, fsa_bwd_args.dq_add).

Taken only by plain eager calls (as _fast.py: exact torch.Tensor arguments, no torch.compile tracing, no
dispatch or function mode but a default-device one) without validate and with tensors the selected attention reads in place;
everything else goes through the operators (nsa.py), so torch.compile and fake tensors see them.
"""

import torch

from . import _fast
from . import _gates
from . import _lib
from . import attention as _att
from . import compressed as _cmp
from . import window as _win


MAX_SPECS = 64  # layouts kept (a new T is a new layout); all dropped when exceeded
_specs = {}
_TENSOR = torch.Tensor


def _describe(t):
    return (t.shape, t.stride(), t.dtype, t.device, t.requires_grad)


def call_key(q, k, v, k_cmp, v_cmp, gates, cu_seqlens, cu_seqlens_c, k_win, v_win, kernel_size, stride, block_size,
             top_k, window, init_blocks, local_blocks, scale, max_seqlen, workspace_limit):
    """What nsa_attention's checks depend on (tensors' layouts, the gates' kinds, the parameters and their
    types, the grad mode), or None for a call the node does not take (not plain tensors, compile tracing, a
    view with the negative bit: its memory holds the values unnegated, which the operators resolve)."""
    if torch.compiler.is_compiling():
        return None
    parts = [torch.is_grad_enabled()]
    for t in (q, k, v, k_cmp, v_cmp, cu_seqlens, cu_seqlens_c):
        if type(t) is not _TENSOR or t.is_neg() or t.is_nested:
            return None
        parts.append(_describe(t))
    for t, shared in ((k_win, k), (v_win, v)):
        if t is None or t is shared:
            parts.append(None)
        elif type(t) is _TENSOR and not t.is_neg() and not t.is_nested:
            parts.append(_describe(t))
        else:
            return None
    for g in gates:
        if type(g) is _TENSOR and not g.is_neg() and not g.is_nested:
            parts.append(_describe(g))
        elif type(g) in (int, float):
            parts.append((type(g), g))
        else:
            return None
    if isinstance(window, (list, tuple)):  # per-head windows: by value (a list may change between calls)
        parts.append(tuple((type(w), w) for w in window))
    elif type(window) is int:
        parts.append(window)
    else:
        return None  # a tensor of windows: its values are read by the checks, not by a key
    for x in (kernel_size, stride, block_size, top_k, init_blocks, local_blocks, scale, max_seqlen,
              workspace_limit):
        if isinstance(x, _TENSOR):
            return None
        parts.append((type(x), x))
    try:
        hash(tuple(parts))
    except TypeError:  # a parameter that is not hashable: the checks decide
        return None
    return tuple(parts)


class _Spec:
    """What the calls of one key share: the checked parameters and the kind of each gate."""

    __slots__ = ("window", "head_windows", "scale", "sel_scale", "kernel_size", "stride", "top_k", "block_size",
                 "init_blocks", "local_blocks", "limit", "max_seqlen", "backward", "row_gates")


class _Call:
    """One call's spec, the selected attention's entry and the selection's tensor."""

    __slots__ = ("spec", "entry", "batch", "max_seqlen", "topk")


def cached(key, q, k, v, k_cmp, v_cmp, gates, cu_seqlens, cu_seqlens_c, k_win, v_win):
    """(o, topk) of a call whose key was checked before, or None (the caller checks and calls layer())."""
    spec = _specs.get(key) if key is not None else None
    if spec is None or _fast._modes_active():
        return None
    return _run(spec, q, k, v, k_cmp, v_cmp, gates, cu_seqlens, cu_seqlens_c,
                None if k_win is k else k_win, None if v_win is v else v_win)


def layer(key, q, k, v, k_cmp, v_cmp, gates, row_gates, cu_seqlens, cu_seqlens_c, k_win, v_win, kernel_size,
          stride, block_size, top_k, window, init_blocks, local_blocks, scale, max_seqlen, workspace_limit):
    """(o, topk) of a checked nsa_attention call, or None: the caller then takes the operators.
    k_win, v_win: None when the window branch reads k and v. gates: as the caller gave them; row_gates:
    which of them are tensors of one value per [T, Hq] row (the node casts those itself)."""
    if key is None or _fast._modes_active() or q.shape[0] == 0:
        return None
    if not (max_seqlen is None or type(max_seqlen) is int) or (scale is not None and type(scale) is not float):
        return None
    try:
        limit = _lib.parse_workspace_limit(workspace_limit)
    except (TypeError, ValueError):
        return None  # the operator path raises it
    leaves = (q, k, v, k_cmp, v_cmp, k_win, v_win) + tuple(g for g in gates if isinstance(g, _TENSOR))
    s = _Spec()
    s.backward = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in leaves)
    s.window, head_windows = _win.head_windows_of(window, q.shape[1])
    s.head_windows = list(head_windows)
    s.scale, s.sel_scale = (0.0 if scale is None else scale), scale
    s.kernel_size, s.stride, s.top_k, s.block_size = kernel_size, stride, top_k, block_size
    s.init_blocks, s.local_blocks, s.limit, s.max_seqlen = init_blocks, local_blocks, limit, max_seqlen
    s.row_gates = tuple(row_gates)
    out = _run(s, q, k, v, k_cmp, v_cmp, gates, cu_seqlens, cu_seqlens_c, k_win, v_win)
    if out is not None:
        if len(_specs) >= MAX_SPECS:
            _specs.clear()
        _specs[key] = s
    return out


def _run(s, q, k, v, k_cmp, v_cmp, gates, cu, cu_c, k_win, v_win):
    t_len, hq, _ = q.shape
    topk = torch.empty((t_len, k.shape[1], s.top_k), dtype=torch.int32, device=q.device)
    found = _fast.lookup(q, k, v, topk, cu, s.block_size, s.sel_scale, s.max_seqlen, "auto", "thk", s.limit, False,
                         s.backward)
    if found is None:
        return None
    c = _Call()
    c.spec, c.topk = s, topk  # topk: an output of the node, made here for the entry's key
    c.entry, c.batch, c.max_seqlen = found
    # Gates of one value per row are cast inside (after the branches' kernels are queued); the others
    # become float32 views here, their casts and broadcasts differentiated by autograd.
    gates = [g if row else _gates.view(g, t_len, hq, q.device) for g, row in zip(gates, s.row_gates)]
    if s.backward:
        return _Node.apply(q, k, v, k_cmp, v_cmp, k_win, v_win, *gates, cu, cu_c, c)
    return _forward(q, k, v, k_cmp, v_cmp, k_win, v_win, gates, cu, cu_c, c)[:2]


def _forward(q, k, v, k_cmp, v_cmp, k_win, v_win, gates, cu, cu_c, c):
    """(o, topk, o_win, lse_win, o_sel, lse_sel, o_cmp, lse_cmp, the gates as float32 [T, Hq])."""
    s, topk = c.spec, c.topk
    b = s.backward
    o_cmp, lse_cmp, _ = _cmp.run_fwd(q, k_cmp, v_cmp, cu, cu_c, s.kernel_size, s.stride, s.scale, s.top_k,
                                     s.block_size, s.init_blocks, s.local_blocks, b, False, topk=topk)
    o_sel, lse_sel = c.entry.forward(q, k, v, topk, cu, c.batch, c.max_seqlen)
    o_win, lse_win = _win.run_fwd(q, (k if k_win is None else k_win), (v if v_win is None else v_win), cu, s.window,
                                  s.head_windows, s.scale, b, False)
    gates = [_gates.as_rows(g, q.device) if row else g for g, row in zip(gates, s.row_gates)]
    o = _gates.run_fwd(o_cmp, o_sel, o_win, *gates)
    return o, topk, o_win, lse_win, o_sel, lse_sel, o_cmp, lse_cmp, gates


class _Node(torch.autograd.Function):
    """The layer's autograd node: gradients of q, k, v, k_cmp, v_cmp, k_win, v_win and the three gates."""

    @staticmethod
    def forward(ctx, q, k, v, k_cmp, v_cmp, k_win, v_win, g_cmp, g_sel, g_win, cu, cu_c, c):
        o, topk, o_win, lse_win, o_sel, lse_sel, o_cmp, lse_cmp, gates = _forward(
            q, k, v, k_cmp, v_cmp, k_win, v_win, (g_cmp, g_sel, g_win), cu, cu_c, c)
        ctx.save_for_backward(q, k, v, k_cmp, v_cmp, k_win, v_win, *gates, cu, cu_c, topk, o_win, lse_win, o_sel,
                              lse_sel, o_cmp, lse_cmp)
        ctx.c = c
        ctx.gate_inputs = [(g.dtype, g.dim()) if row else None for g, row in zip((g_cmp, g_sel, g_win),
                                                                                  c.spec.row_gates)]
        ctx.mark_non_differentiable(topk)
        return o, topk

    @staticmethod
    def backward(ctx, do, _dtopk):
        (q, k, v, k_cmp, v_cmp, k_win, v_win, g_cmp, g_sel, g_win, cu, cu_c, topk, o_win, lse_win, o_sel, lse_sel,
         o_cmp, lse_cmp) = ctx.saved_tensors
        c = ctx.c
        s = c.spec
        do = _att._kernel_ready(do)
        dgate = torch.empty((3,) + o_sel.shape[:2], dtype=torch.float32, device=do.device)
        dq, dk_w, dv_w = _win.run_bwd(do, q, (k if k_win is None else k_win), (v if v_win is None else v_win),
                                      o_win, lse_win, cu, s.window, s.head_windows, s.scale, False, gate=g_win,
                                      gate_grad=dgate[2])
        dq, dk_c, dv_c = _cmp.run_bwd(do, q, k_cmp, v_cmp, o_cmp, lse_cmp, cu, cu_c, s.kernel_size, s.stride,
                                      s.scale, s.top_k, s.block_size, s.init_blocks, s.local_blocks, False, dq_into=dq,
                                      gate=g_cmp, gate_grad=dgate[0])
        e = c.entry
        if e.gen != _fast._generation[0]:  # clear_plans() destroyed its plan since the forward
            found = _fast.lookup(q, k, v, topk, cu, s.block_size, s.sel_scale, s.max_seqlen, "auto", "thk", s.limit,
                                 False, True)
            if found is None:
                raise RuntimeError("the selected attention's plan was destroyed and cannot be made again")
            e = found[0]
        dq, dk, dv = e.backward(do, q, k, v, o_sel, lse_sel, topk, cu, c.batch, c.max_seqlen, dq_into=dq, gate=g_sel,
                                gate_grad=dgate[1])
        if k_win is None:
            dk.add_(dk_w)
            dk_w = None
        if v_win is None:
            dv.add_(dv_w)
            dv_w = None
        dgates = []
        for x, inp in enumerate(ctx.gate_inputs):  # a gate cast inside: its gradient in its dtype and shape
            g = dgate[x]
            if inp is not None:
                g = g.to(inp[0])
                if inp[1] == 3:
                    g = g.unsqueeze(2)
            dgates.append(g)
        need = ctx.needs_input_grad
        grads = (dq, dk, dv, dk_c, dv_c, dk_w, dv_w, *dgates)
        grads = tuple(g if need[i] else None for i, g in enumerate(grads))
        inputs = (q, k, v, k_cmp, v_cmp, g_cmp, g_sel, g_win, do) + tuple(t for t in (k_win, v_win) if t is not None)
        return _fast.first_order_only("fsa_jit.nsa_attention", inputs, grads) + (None,) * 3
