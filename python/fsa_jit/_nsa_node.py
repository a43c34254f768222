"""The NSA layer's eager path: the whole layer as one autograd node that calls the branches straight.

Why: through the operators, the layer is four forward and four backward trips through the dispatcher, each
with its own autograd node, argument checks and structures; the host held a forward call at T 8192 for
about 1.1 ms and a backward for 1.9 ms (bench/layer_host.py, H200 host), and the GPU waits for the part of
it before the first kernel. Here the branches' bodies (the same functions the operators run) are called
straight, the selected attention through its fast-path entry (_fast.py). The backward runs the window,
compressed and selected branches in that order, each branch's output gradient dropped once read, so the
peak memory is the operators' (the selected backward's workspace comes last, when the others' are gone);
the gradient of q is summed in that order too (window + compressed, then selected).

Taken only by plain eager calls (as _fast.py: exact torch.Tensor arguments, no torch.compile tracing, no
dispatch or function mode) without validate and with tensors the selected attention reads in place;
everything else goes through the operators (nsa.py), so torch.compile and fake tensors see them.
"""

import torch
from torch.autograd.function import once_differentiable

from . import _fast
from . import _gates
from . import _lib
from . import compressed as _cmp
from . import window as _win


class _Call:
    """One call's parameters and the selected attention's entry."""

    __slots__ = ("window", "head_windows", "scale", "kernel_size", "stride", "top_k", "block_size", "init_blocks",
                 "local_blocks", "sel_scale", "entry", "batch", "max_seqlen", "limit", "topk")


def layer(q, k, v, k_cmp, v_cmp, gates, cu_seqlens, cu_seqlens_c, k_win, v_win, kernel_size, stride, block_size,
          top_k, window, init_blocks, local_blocks, scale, max_seqlen, workspace_limit):
    """(o, topk) of a checked nsa_attention call, or None: the caller then takes the operators.
    k_win, v_win: None when the window branch reads k and v. gates: float32 [T, Hq] views."""
    if torch.compiler.is_compiling():
        return None
    T = torch.Tensor
    tensors = (q, k, v, k_cmp, v_cmp, cu_seqlens, cu_seqlens_c) + tuple(gates)
    if any(type(t) is not T for t in tensors) or any(t is not None and type(t) is not T for t in (k_win, v_win)):
        return None
    if _fast._modes_active() or q.shape[0] == 0:
        return None
    if not (max_seqlen is None or type(max_seqlen) is int) or (scale is not None and type(scale) is not float):
        return None
    try:
        limit = _lib.parse_workspace_limit(workspace_limit)
    except (TypeError, ValueError):
        return None  # the operator path raises it
    leaves = (q, k, v, k_cmp, v_cmp, k_win, v_win) + tuple(gates)
    backward = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in leaves)
    t_len, hq, _ = q.shape
    topk = torch.empty((t_len, k.shape[1], top_k), dtype=torch.int32, device=q.device)
    found = _fast.lookup(q, k, v, topk, cu_seqlens, block_size, scale, max_seqlen, "auto", "thk", limit, False,
                         backward)
    if found is None:
        return None
    c = _Call()
    c.window, c.head_windows = _win.head_windows_of(window, hq)
    c.head_windows = list(c.head_windows)
    c.scale, c.sel_scale = (0.0 if scale is None else scale), scale
    c.kernel_size, c.stride, c.top_k, c.block_size = kernel_size, stride, top_k, block_size
    c.init_blocks, c.local_blocks, c.limit = init_blocks, local_blocks, limit
    c.entry, c.batch, c.max_seqlen = found
    c.topk = topk  # made here for the entry's key; an output of the node, not an input
    if backward:
        return _Node.apply(q, k, v, k_cmp, v_cmp, k_win, v_win, *gates, cu_seqlens, cu_seqlens_c, c)
    return _forward(q, k, v, k_cmp, v_cmp, k_win, v_win, gates, cu_seqlens, cu_seqlens_c, c, False)[:2]


def _forward(q, k, v, k_cmp, v_cmp, k_win, v_win, gates, cu, cu_c, c, backward):
    """(o, topk, o_win, lse_win, o_sel, lse_sel, o_cmp, lse_cmp)."""
    topk = c.topk
    o_cmp, lse_cmp, _ = _cmp.run_fwd(q, k_cmp, v_cmp, cu, cu_c, c.kernel_size, c.stride, c.scale, c.top_k,
                                     c.block_size, c.init_blocks, c.local_blocks, backward, False, topk=topk)
    o_sel, lse_sel = c.entry.forward(q, k, v, topk, cu, c.batch, c.max_seqlen)
    o_win, lse_win = _win.run_fwd(q, (k if k_win is None else k_win), (v if v_win is None else v_win), cu, c.window,
                                  c.head_windows, c.scale, backward, False)
    o = _gates.run_fwd(o_cmp, o_sel, o_win, *gates)
    return o, topk, o_win, lse_win, o_sel, lse_sel, o_cmp, lse_cmp


class _Node(torch.autograd.Function):
    """The layer's autograd node: gradients of q, k, v, k_cmp, v_cmp, k_win, v_win and the three gates."""

    @staticmethod
    def forward(ctx, q, k, v, k_cmp, v_cmp, k_win, v_win, g_cmp, g_sel, g_win, cu, cu_c, c):
        gates = (g_cmp, g_sel, g_win)
        o, topk, o_win, lse_win, o_sel, lse_sel, o_cmp, lse_cmp = _forward(q, k, v, k_cmp, v_cmp, k_win, v_win,
                                                                          gates, cu, cu_c, c, True)
        ctx.save_for_backward(q, k, v, k_cmp, v_cmp, k_win, v_win, g_cmp, g_sel, g_win, cu, cu_c, topk, o_win,
                              lse_win, o_sel, lse_sel, o_cmp, lse_cmp)
        ctx.c = c
        ctx.mark_non_differentiable(topk)
        return o, topk

    @staticmethod
    @once_differentiable
    def backward(ctx, do, _dtopk):
        (q, k, v, k_cmp, v_cmp, k_win, v_win, g_cmp, g_sel, g_win, cu, cu_c, topk, o_win, lse_win, o_sel, lse_sel,
         o_cmp, lse_cmp) = ctx.saved_tensors
        c = ctx.c
        d_cmp, d_sel, d_win, dgate = _gates.run_bwd(do, o_cmp, o_sel, o_win, g_cmp, g_sel, g_win)
        dq, dk_w, dv_w = _win.run_bwd(d_win, q, (k if k_win is None else k_win), (v if v_win is None else v_win),
                                      o_win, lse_win, cu, c.window, c.head_windows, c.scale, False)
        del d_win
        dq_c, dk_c, dv_c = _cmp.run_bwd(d_cmp, q, k_cmp, v_cmp, o_cmp, lse_cmp, cu, cu_c, c.kernel_size, c.stride,
                                        c.scale, c.top_k, c.block_size, c.init_blocks, c.local_blocks, False)
        del d_cmp
        dq.add_(dq_c)
        del dq_c
        e = c.entry
        if e.gen != _fast._generation[0]:  # clear_plans() destroyed its plan since the forward
            found = _fast.lookup(q, k, v, topk, cu, c.block_size, c.sel_scale, c.max_seqlen, "auto", "thk", c.limit,
                                 False, True)
            if found is None:
                raise RuntimeError("the selected attention's plan was destroyed and cannot be made again")
            e = found[0]
        dq_s, dk, dv = e.backward(d_sel, q, k, v, o_sel, lse_sel, topk, cu, c.batch, c.max_seqlen)
        del d_sel
        dq.add_(dq_s)
        if k_win is None:
            dk.add_(dk_w)
            dk_w = None
        if v_win is None:
            dv.add_(dv_w)
            dv_w = None
        need = ctx.needs_input_grad
        grads = (dq, dk, dv, dk_c, dv_c, dk_w, dv_w, dgate[0], dgate[1], dgate[2])
        return tuple(g if need[i] else None for i, g in enumerate(grads)) + (None,) * 3
