"""Native Sparse Attention: the three branches of libfsa composed with the caller's gates.

    o = g_cmp * o_cmp + g_sel * o_sel + g_win * o_win

- o_cmp: compressed attention of q over the caller's compressed keys and
  values (fsa_jit.compressed_attention), which also selects the top-k blocks;
- o_sel: selected attention of q over the blocks it selected
  (fsa_jit.selected_attention);
- o_win: sliding-window attention (fsa_jit.window_attention).

Example (a few lines that train; see docs/nsa.md)::

    from fsa_jit.nsa import compress_mean, nsa_attention
    k_cmp, cu_c = compress_mean(k, cu_seqlens, kernel_size=32, stride=16)
    v_cmp, _ = compress_mean(v, cu_seqlens, kernel_size=32, stride=16)
    o = nsa_attention(q, k, v, k_cmp, v_cmp, g_cmp, g_sel, g_win, cu_seqlens, cu_c)
    o.float().square().mean().backward()
"""

import torch

from . import _gates
from . import _lib
from . import _nsa_node
from . import attention as _att
from . import compressed as _cmp
from . import window as _win
from .compressed import compressed_attention
from .window import window_attention


def compressed_counts(seqlens, kernel_size, stride):
    """Compressed tokens of each sequence: one per stride whose kernel fits, max(0, (len - l) // d + 1)."""
    return [max(0, (n - kernel_size) // stride + 1) for n in seqlens]


def _offsets(counts):
    """cu_seqlens_c of the counts; the compressed tokens stay within what libfsa takes (ValueError, not the
    RuntimeError of an int32 tensor that cannot hold them)."""
    out = [0]
    for c in counts:
        out.append(out[-1] + c)
    _att.check_token_count("the compression", out[-1])
    return out


def _check_kernel(kernel_size, stride):
    _cmp.require_int("kernel_size", kernel_size, 1, _cmp.MAX_KERNEL_SIZE)
    _cmp.require_int("stride", stride, 1, kernel_size)


def _host_offsets(cu_seqlens, totals=()):
    """cu_seqlens (a 1-D integer tensor of at least 2 entries, starting at 0, never falling and, for each T of
    totals, ending at T) read on the host as a list of ints (TypeError, ValueError)."""
    _att._check_tensor("cu_seqlens", cu_seqlens)
    _att._check_host_readable("cu_seqlens", cu_seqlens)
    if cu_seqlens.is_floating_point() or cu_seqlens.is_complex() or cu_seqlens.dtype == torch.bool:
        raise TypeError(f"cu_seqlens must be an integer tensor (int32), got {cu_seqlens.dtype}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError(f"cu_seqlens must be 1-D [batch + 1] with at least 2 entries, got shape "
                         f"{tuple(cu_seqlens.shape)}")
    cu = [int(v) for v in cu_seqlens.tolist()]
    rises = cu[0] == 0 and all(a <= b for a, b in zip(cu, cu[1:]))
    if not rises and not totals:
        raise ValueError(f"cu_seqlens must start at 0 and never fall, got {cu}")
    for t in totals:
        if not rises or cu[-1] != t:
            raise ValueError(f"cu_seqlens must rise from 0 to T={t}, got {cu}")
    return cu


def compressed_cu_seqlens(cu_seqlens, kernel_size, stride):
    """cu_seqlens_c (int32, on cu_seqlens's device) of the compression with kernel_size and stride, checked as
    compress_mean checks them. Reads cu_seqlens on the host and copies the result back (host synchronizations
    when it is on the GPU)."""
    _check_kernel(kernel_size, stride)
    cu = _host_offsets(cu_seqlens)
    counts = compressed_counts([b - a for a, b in zip(cu, cu[1:])], kernel_size, stride)
    return torch.tensor(_offsets(counts), dtype=torch.int32, device=cu_seqlens.device)


def compress_mean(x, cu_seqlens, kernel_size=32, stride=16):
    """Mean-pooling compression per sequence: compressed token j of a sequence is the mean of its tokens
    j*d .. j*d + l - 1 (l = kernel_size, d = stride), for every j whose window fits in the sequence.

    x: [T, H, D] (any float dtype, any device); cu_seqlens: int32 [B + 1]. Returns (x_cmp [Tc, H, D] in x's
    dtype, averaged in float32; cu_seqlens_c int32 [B + 1] on cu_seqlens' device). Differentiable in x. Reads
    cu_seqlens on the host and copies the gather indices it builds to x's device (host synchronizations on a GPU,
    so no CUDA graph capture): a helper for examples and tests; a model would use its own (learned)
    compression.
    """
    (x_cmp,), cu_c = _compress_means((x,), cu_seqlens, kernel_size, stride)
    return x_cmp, cu_c


def _compress_means(xs, cu_seqlens, kernel_size, stride, names=None):
    """compress_mean of each tensor of xs (the same T), reading cu_seqlens on the host once:
    (tuple of x_cmp, cu_seqlens_c). names: the caller's names of xs, for messages ("x" each by default)."""
    names = ("x",) * len(xs) if names is None else names
    _check_kernel(kernel_size, stride)
    for name, x in zip(names, xs):
        _att._check_tensor(name, x)
        if not x.is_floating_point():  # the mean of integers would be truncated back into them
            raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
        if x.dim() != 3:
            raise ValueError(f"{name} must be [T, heads, dim], got shape {tuple(x.shape)}")
    if len(xs) > 1 and len({x.shape[0] for x in xs}) > 1:
        raise ValueError(", ".join(f"{n} has {x.shape[0]} tokens" for n, x in zip(names, xs)) + ": they must agree")
    cu = _host_offsets(cu_seqlens, [x.shape[0] for x in xs])
    counts = compressed_counts([b - a for a, b in zip(cu, cu[1:])], kernel_size, stride)
    starts = [a + j * stride for a, n in zip(cu, counts) for j in range(n)]
    cu_c = torch.tensor(_offsets(counts), dtype=torch.int32, device=cu_seqlens.device)
    out = []
    for x in xs:
        # No window that fits still gathers (an empty index): the result stays differentiable in x.
        idx = torch.tensor(starts, dtype=torch.long, device=x.device)[:, None] + torch.arange(kernel_size,
                                                                                               device=x.device)
        out.append(x[idx].float().mean(dim=1).to(x.dtype))
    return tuple(out), cu_c


# ------------------------------------------------------------------- gates
# The gate operators: libfsa's gate kernels (_gates.py) for compiled code and the layer's operator path. They and
# their fake implementations check their tensors (_gates.check_operands); nsa_attention passes them checked.


def clear_plans():
    """Destroys the cached gate plans (a captured graph that used one must not replay)."""
    _gates.clear_plans()


@torch.library.custom_op("fsa_jit::nsa_gate_fwd", mutates_args=())
def _gate_fwd_op(o_cmp: torch.Tensor, o_sel: torch.Tensor, o_win: torch.Tensor, g_cmp: torch.Tensor,
                 g_sel: torch.Tensor, g_win: torch.Tensor) -> torch.Tensor:
    _gates.check_operands((o_cmp, o_sel, o_win), (g_cmp, g_sel, g_win))
    return _gates.run_fwd(o_cmp, o_sel, o_win, g_cmp, g_sel, g_win)


@_gate_fwd_op.register_fake
def _gate_fwd_fake(o_cmp, o_sel, o_win, g_cmp, g_sel, g_win):
    _gates.check_operands((o_cmp, o_sel, o_win), (g_cmp, g_sel, g_win))
    return o_cmp.new_empty(o_cmp.shape)


@torch.library.custom_op("fsa_jit::nsa_gate_bwd", mutates_args=())
def _gate_bwd_op(dout: torch.Tensor, o_cmp: torch.Tensor, o_sel: torch.Tensor, o_win: torch.Tensor,
                 g_cmp: torch.Tensor, g_sel: torch.Tensor,
                 g_win: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    _gates.check_operands((o_cmp, o_sel, o_win), (g_cmp, g_sel, g_win), dout)
    return _gates.run_bwd(dout, o_cmp, o_sel, o_win, g_cmp, g_sel, g_win)


@_gate_bwd_op.register_fake
def _gate_bwd_fake(dout, o_cmp, o_sel, o_win, g_cmp, g_sel, g_win):
    _gates.check_operands((o_cmp, o_sel, o_win), (g_cmp, g_sel, g_win), dout)
    t_len, hq, _ = o_cmp.shape
    return (o_cmp.new_empty(o_cmp.shape), o_cmp.new_empty(o_cmp.shape), o_cmp.new_empty(o_cmp.shape),
            o_cmp.new_empty((3, t_len, hq), dtype=torch.float32))


def _gate_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _gate_backward(ctx, dout):
    d_cmp, d_sel, d_win, dgate = torch.ops.fsa_jit.nsa_gate_bwd(dout, *ctx.saved_tensors)
    return d_cmp, d_sel, d_win, dgate[0], dgate[1], dgate[2]


_gate_fwd_op.register_autograd(_gate_backward, setup_context=_gate_setup)


# The selected attention's workspace cap in the layer unless the caller gives one. libfsa's own default
# leaves what the call's outputs leave of its budget; at NSA's shape (Hq 64, Dk 192 / Dv 128) and 64K tokens
# those alone fill it, so the backward gets the floor (256 MiB plus one KV head's dK/dV accumulator) and runs
# in 140 chunks of ~1870 tokens. With the 256 MiB floor alone (200 chunks of ~1300 tokens) it took 136 ms
# instead of 56 ms with 2 GiB (16 chunks; H200, bench/RESULTS.md), for 1.85 GB more peak memory.
SELECTED_WORKSPACE = "2G"


def nsa_attention(q, k, v, k_cmp, v_cmp, g_cmp, g_sel, g_win, cu_seqlens, cu_seqlens_c, kernel_size=32, stride=16,
                  block_size=64, top_k=16, window=512, init_blocks=1, local_blocks=2, scale=None, k_win=None,
                  v_win=None, max_seqlen=None, return_topk=False, validate=False, workspace_limit=None):
    """One NSA attention layer over a packed varlen batch: g_cmp * o_cmp + g_sel * o_sel + g_win * o_win.

    q [T, Hq, Dk]; k [T, Hkv, Dk], v [T, Hkv, Dv]: the keys and values of the selected branch (and of the
    window branch unless k_win, v_win are given); k_cmp [Tc, Hkv, Dk], v_cmp [Tc, Hkv, Dv]: the caller's
    compression with kernel_size l and stride d per sequence (compress_mean makes one), cu_seqlens_c its
    offsets; cu_seqlens int32 [B + 1]. fp16 or bf16 on one CUDA device.
    g_cmp, g_sel, g_win: the gates, numbers or tensors: one of one or two dims broadcasts against [T, Hq] (per
    head: [Hq]), one of three dims against [T, Hq, 1] (per head: [1, Hq, 1]). A tensor of
    one element may be on another device (the CPU): it is then copied to q's device at every call, a copy
    PyTorch finishes with a host synchronization, so no CUDA graph capture; keep gate tensors on q's device,
    or pass numbers, for a call that never synchronizes.
    The selection: top_k (1..64) blocks of block_size positions (16, 32, 64, 128 or 256; a multiple of stride,
    block_size / stride at most 64; (kernel_size - 1) // stride at most 64 too) per
    KV head and token, scored by the compressed attention, with the first init_blocks and the local_blocks
    ending at the token's own block forced. window: the sliding window W, or Hq windows as
    fsa_jit.window_attention takes them (a tensor of windows is read on the host at every call: a
    synchronization when it is on the GPU). scale: None = 1/sqrt(Dk).
    validate: libfsa's check mode in every branch: the offsets (and the selection) are checked on the device
    first and bad metadata raises fsa_jit.FsaError; one synchronization per branch and call.
    workspace_limit: the selected attention's workspace cap (as fsa_jit.selected_attention takes it);
    None = SELECTED_WORKSPACE (2 GiB), 0 = libfsa's default cap.

    Returns o [T, Hq, Dv] in q's dtype, and the selection [T, Hkv, top_k] int32 when return_topk.
    Differentiable in q, k, v, k_cmp, v_cmp, k_win, v_win and the gates, once (differentiating the gradients,
    taken with create_graph=True, raises).
    """
    _att._check_flag("validate", validate)
    _att._check_flag("return_topk", return_topk)
    window = _win.windows_read_once(window)
    key = None
    if not validate:  # a plain eager call of a layout seen before skips the checks below
        key = _nsa_node.call_key(q, k, v, k_cmp, v_cmp, (g_cmp, g_sel, g_win), cu_seqlens, cu_seqlens_c, k_win, v_win,
                                 kernel_size, stride, block_size, top_k, window, init_blocks, local_blocks, scale,
                                 max_seqlen, workspace_limit)
        out = _nsa_node.cached(key, q, k, v, k_cmp, v_cmp, (g_cmp, g_sel, g_win), cu_seqlens, cu_seqlens_c, k_win,
                               v_win)
        if out is not None:
            return out if return_topk else out[0]
    for name, t in (("q", q), ("cu_seqlens", cu_seqlens)):
        _att._check_tensor(name, t)
    if q.dim() != 3:
        raise ValueError(f"q must be 3-D [T, Hq, Dk], got shape {tuple(q.shape)}")
    t_len, hq, _ = q.shape
    raw_gates = (g_cmp, g_sel, g_win)
    row_gates = [_gates.check(n, g, t_len, hq, q.device) for n, g in zip(("g_cmp", "g_sel", "g_win"), raw_gates)]
    _cmp.require_int("top_k", top_k, 1, _att.MAX_TOP_K)
    _cmp.require_int("block_size", block_size, 1)  # the type first: True or "64" are no block size
    if block_size not in _att.BLOCK_SIZES:
        raise ValueError(f"block_size must be one of {_att.BLOCK_SIZES} (the selected attention's), got {block_size!r}")
    k_win = k if k_win is None else k_win
    v_win = v if v_win is None else v_win
    # Every branch's arguments first, devices last, so that a bad call fails before any kernel runs (and
    # every other check can run on a CPU-only machine).
    _cmp.check_arguments(q, k_cmp, v_cmp, cu_seqlens, cu_seqlens_c, kernel_size, stride, scale, top_k, block_size,
                         init_blocks, local_blocks, require_cuda=False, names=("k_cmp", "v_cmp"))
    win_names = ("k" if k_win is k else "k_win", "v" if v_win is v else "v_win")
    for names, keys, values in ((("k", "v"), k, v), (win_names, k_win, v_win)):  # the selected branch: the window's
        _win.check_arguments(q, keys, values, cu_seqlens, window, scale, require_cuda=False, names=names)
        if keys.shape[1] != k_cmp.shape[1]:
            raise ValueError(f"k_cmp has {k_cmp.shape[1]} KV heads but {names[0]} has {keys.shape[1]}")
    # The gate kernels sum the three branches' outputs row by row: one value head dim for all.
    for name, values in (("v_cmp", v_cmp), (win_names[1], v_win)):
        if values.shape[2] != v.shape[2]:
            raise ValueError(f"{name} has value head dim {values.shape[2]} but v has {v.shape[2]}: the branches' "
                             "outputs are summed, so v, v_cmp and v_win share Dv")
    dk, dv = q.shape[2], v.shape[2]
    # The layer's node runs the selected backward for any gradient, a gate's included (its rowsum(dout * o)).
    grads = torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                            for t in (q, k, v, k_cmp, v_cmp, k_win, v_win) + raw_gates)
    if grads and dk + dv > _att.ONE_PASS_BWD_COLS and (dk % 32 or dv % 32):  # the selected attention's backward
        raise ValueError(f"the backward with head dims {dk} (q, k) and {dv} (v): when together over "
                         f"{_att.ONE_PASS_BWD_COLS}, both must be multiples of 32")
    # The selected branch's own arguments too, before the compressed branch runs.
    sel_limit = SELECTED_WORKSPACE if workspace_limit is None else workspace_limit
    _lib.parse_workspace_limit(sel_limit)
    _att.check_max_seqlen(max_seqlen, t_len)
    _cmp.check_devices((("q", q), ("k", k), ("v", v), ("k_cmp", k_cmp), ("v_cmp", v_cmp), ("k_win", k_win),
                        ("v_win", v_win), ("cu_seqlens", cu_seqlens), ("cu_seqlens_c", cu_seqlens_c)), q)

    if not validate:  # plain eager calls: the layer's own autograd node (_nsa_node.py)
        out = _nsa_node.layer(key, q, k, v, k_cmp, v_cmp, raw_gates, row_gates, cu_seqlens, cu_seqlens_c,
                              None if k_win is k else k_win, None if v_win is v else v_win, kernel_size, stride,
                              block_size, top_k, window, init_blocks, local_blocks, scale, max_seqlen, sel_limit)
        if out is not None:
            return out if return_topk else out[0]
    gates = [_gates.view(g, t_len, hq, q.device) for g in raw_gates]
    o_cmp, _, topk = compressed_attention(q, k_cmp, v_cmp, cu_seqlens, cu_seqlens_c, kernel_size, stride, scale,
                                          top_k, block_size, init_blocks, local_blocks, validate=validate)
    o_sel = _att.selected_attention(q, k, v, topk, cu_seqlens, block_size, scale, max_seqlen=max_seqlen,
                                    topk_layout="thk", validate=validate,
                                    workspace_limit=sel_limit)
    o_win = window_attention(q, k_win, v_win, cu_seqlens, window, scale, validate=validate)
    o = torch.ops.fsa_jit.nsa_gate_fwd(o_cmp, o_sel, o_win, *gates)
    return (o, topk) if return_topk else o


class NSAttention(torch.nn.Module):
    """nsa_attention with mean-pooling compression of k and v (compress_mean) and fixed hyperparameters.

    forward(q, k, v, g_cmp, g_sel, g_win, cu_seqlens) -> o [T, Hq, Dv]. Holds no parameters: the
    projections that make q, k, v and the gates belong to the model around it. Reads cu_seqlens on the host
    once per call and copies what the mean compression of k and v builds there to the device (host
    synchronizations), so no CUDA graph capture.
    """

    def __init__(self, kernel_size=32, stride=16, block_size=64, top_k=16, window=512, init_blocks=1, local_blocks=2,
                 scale=None):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride
        self.block_size, self.top_k, self.window = block_size, top_k, window
        self.init_blocks, self.local_blocks, self.scale = init_blocks, local_blocks, scale

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, block_size={self.block_size}, "
                f"top_k={self.top_k}, window={self.window}, init_blocks={self.init_blocks}, "
                f"local_blocks={self.local_blocks}, scale={self.scale}")

    def forward(self, q, k, v, g_cmp, g_sel, g_win, cu_seqlens):
        (k_cmp, v_cmp), cu_c = _compress_means((k, v), cu_seqlens, self.kernel_size, self.stride, ("k", "v"))
        return nsa_attention(q, k, v, k_cmp, v_cmp, g_cmp, g_sel, g_win, cu_seqlens, cu_c,
                             kernel_size=self.kernel_size, stride=self.stride, block_size=self.block_size,
                             top_k=self.top_k, window=self.window, init_blocks=self.init_blocks,
                             local_blocks=self.local_blocks, scale=self.scale)
