"""The eager fast path of selected_attention: a call whose arguments have the shapes, strides, dtypes,
devices and parameters of an earlier call skips the work that only depends on those.

Why: the call through the custom operator held the host for 0.26-0.63 ms before its first kernel
started (bench/RESULTS.md): the dispatcher's trip through Python (about 50 us), the argument checks
(about 16 us), ctypes structures built field by field, `torch.cuda.device`, a Stream object per call.
A call started on an idle GPU waits for all of it. Here, per call: one tuple key and one dict lookup,
the checks that depend on values rather than on the key (cu_seqlens' length, max_seqlen, pointer
alignment), the output and workspace tensors from torch's caching allocator, eight pointers written
into a structure built once, and the C call.

Only plain eager calls take it: tensors of exactly torch.Tensor (no subclass, no fake tensor), no
torch.compile tracing, no dispatch or function mode (but a default-device one), no functorch transform, parameters of the plain
types (int, float, str, bool, None). Everything else, and every call whose tensors libfsa cannot read
in place, goes through the custom operator as before, so torch.compile, fake tensors and CUDA graphs of
compiled code see the operator. A call of the fast path is itself graph-capturable: no host
synchronization, allocations from the caching allocator, the current stream. The operators' bodies use
the same entries (op_entry), so compiled code also skips the per-call structure building.

The cache holds what check_arguments decided for the key: every check whose result could differ for
another call is either part of the key or repeated per call.
"""

import ctypes
import threading

import torch

from . import _lib

MAX_ENTRIES = 256  # distinct keys kept (a new T is a new key); all dropped when exceeded
_entries = {}
_generation = [0]  # bumped by invalidate(): entries made before refer to destroyed plans
_lock = threading.Lock()

try:
    _raw_stream = torch._C._cuda_getCurrentRawStream  # the current stream's handle, no Stream object
except AttributeError:  # pragma: no cover - older torch
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream


def invalidate():
    """Drops every entry (plans destroyed, or the tuning mode changed)."""
    with _lock:
        _entries.clear()
        _generation[0] += 1


def _slots(struct_type, *names):
    """Indices of the named uint64 fields of a ctypes structure seen as an array of uint64."""
    out = []
    for name in names:
        base, _, sub = name.partition(".")
        offset = getattr(struct_type, base).offset
        if sub:
            offset += getattr(_lib.fsa_tensor, sub).offset
        assert offset % 8 == 0
        out.append(offset // 8)
    return out


_FWD_PTRS = _slots(_lib.fsa_fwd_args, "q.ptr", "k.ptr", "v.ptr", "o.ptr", "topk.ptr", "cu_seqlens", "lse",
                   "workspace", "workspace_bytes")
_BWD_PTRS = _slots(_lib.fsa_bwd_args, "q.ptr", "k.ptr", "v.ptr", "o.ptr", "dout.ptr", "dq.ptr", "dk.ptr", "dv.ptr",
                   "topk.ptr", "cu_seqlens", "lse", "workspace", "workspace_bytes")
_FWD_BATCH = _lib.fsa_fwd_args.batch.offset // 4  # batch, max_seqlen: two int32 side by side
_BWD_BATCH = _lib.fsa_bwd_args.batch.offset // 4
assert _lib.fsa_fwd_args.max_seqlen.offset == _lib.fsa_fwd_args.batch.offset + 4


class _Args:
    """A ctypes argument structure built once, and views that write its 64-bit and 32-bit fields in place."""

    def __init__(self, struct):
        self.struct = struct
        self.u64 = memoryview(struct).cast("B").cast("Q")
        self.i32 = memoryview(struct).cast("B").cast("i")
        self.ref = ctypes.byref(struct)


def _modes_active():
    if torch._C._len_torch_dispatch_stack() > 0 or torch._C._are_functorch_transforms_active():
        return True
    return torch._C._is_torch_function_mode_enabled() and not _only_default_device_modes()


def _only_default_device_modes():
    """Whether every active function mode is a default-device one (torch.set_default_device, `with
    torch.device(...)`): those only change where factory functions allocate, and the fast paths name the
    device of everything they allocate, so they may stay on."""
    try:
        from torch.overrides import _get_current_function_mode_stack
        from torch.utils._device import DeviceContext

        modes = _get_current_function_mode_stack()
    except (ImportError, AttributeError):  # pragma: no cover - another torch: take the operators
        return False
    return len(modes) > 0 and all(type(m) is DeviceContext for m in modes)


class _Entry:
    """What a key's calls share: the checked layout, the plan, the argument structures (guarded by
    `lock`: ctypes releases the GIL during the C call), workspace sizes per batch."""

    def __init__(self, lib, q, k, v, topk_idx, layout, algo, block_size, scale, limit, validate,
                 backward):
        from . import attention

        self.gen = _generation[0]
        self.lib = lib
        self.lock = threading.Lock()
        self.t_len, self.hq, self.d = q.shape
        self.dv = v.shape[2]
        self.dtype = q.dtype
        self.device = q.device
        self.index = q.device.index
        self.layout = layout
        self.op_call = (block_size, 0.0 if scale is None else scale, algo, layout, limit, validate)
        self.plan = attention._get_plan(lib, self.index, q.dtype, self.d, self.hq, k.shape[1], block_size,
                                        topk_idx.shape[2], attention._scale32(self.op_call[1]), algo, limit,
                                        backward, validate, self.dv)
        self.ws_fwd, self.ws_bwd = {}, {}
        # Views of q, k, v, o and topk_idx: strides are part of the key, so only pointers change.
        self.views = dict(q=attention._head_strides(q), k=attention._head_strides(k), v=attention._head_strides(v),
                          o=(self.hq * self.dv, self.dv))
        _, topk_hs, topk_ts = attention._topk_ready(topk_idx, layout)
        self.views["topk"] = (topk_ts, topk_hs)
        # dq, dk, dv: made contiguous by every backward.
        hkv = k.shape[1]
        self.views.update(dq=(self.hq * self.d, self.d), dk=(hkv * self.d, self.d), dv=(hkv * self.dv, self.dv))
        self.fwd = _Args(self._struct(_lib.fsa_fwd_args, "q", "k", "v", "o", "topk"))
        self.bwd = _Args(self._struct(_lib.fsa_bwd_args, "q", "k", "v", "topk", "dq", "dk", "dv"))

    def _struct(self, struct_type, *names):
        s = struct_type(total_tokens=self.t_len)
        for name in names:
            getattr(s, name).token_stride, getattr(s, name).head_stride = self.views[name]
        return s

    def _ws_bytes(self, batch, backward):
        sizes = self.ws_bwd if backward else self.ws_fwd
        n = sizes.get(batch)
        if n is None:
            if len(sizes) >= 64:
                sizes.clear()
            n = sizes[batch] = self.plan.workspace_bytes(self.lib, self.t_len, batch, backward=backward)
        return n

    def _call(self, backward, args, slots, batch, max_seqlen, ptrs, before=None):
        """Writes the call's batch, max_seqlen, pointers (slots[i] <- ptrs[i]) and a workspace of the size
        cached for the batch into `args`, then calls libfsa; `before` runs first under the same lock.
        A size libfsa finds too small (a tuning measurement changed the plan's choice since it was
        cached) is asked again once."""
        fn = self.lib.fsa_selected_attention_bwd if backward else self.lib.fsa_selected_attention_fwd
        at = _BWD_BATCH if backward else _FWD_BATCH
        for _ in range(2):
            nbytes = self._ws_bytes(batch, backward)
            # (libfsa checks the workspace's alignment itself: FSA_STATUS_MISALIGNED)
            ws = torch.empty(nbytes, dtype=torch.uint8, device=self.device) if nbytes else None
            ws_ptr = ws.data_ptr() if nbytes else 0
            with self.lock:
                if before is not None:
                    before()
                u = args.u64
                args.i32[at] = batch
                args.i32[at + 1] = max_seqlen
                for slot, ptr in zip(slots, ptrs):
                    u[slot] = ptr
                u[slots[-2]] = ws_ptr
                u[slots[-1]] = nbytes
                st = fn(self.plan.handle, args.ref, _raw_stream(self.index))
            if st != _lib.FSA_STATUS_WORKSPACE_TOO_SMALL:
                break
            (self.ws_bwd if backward else self.ws_fwd).clear()
        self.lib.check(st, "fsa_selected_attention_bwd" if backward else "fsa_selected_attention_fwd")

    def forward(self, q, k, v, topk_idx, cu_seqlens, batch, max_seqlen):
        """(o, lse): the tensors must have the key's shapes and strides, 16-byte aligned."""
        o = torch.empty((self.t_len, self.hq, self.dv), dtype=self.dtype, device=self.device)
        lse = torch.empty((self.hq, self.t_len), dtype=torch.float32, device=self.device)
        ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), topk_idx.data_ptr(), cu_seqlens.data_ptr(),
                lse.data_ptr())
        self._call(False, self.fwd, _FWD_PTRS, batch, max_seqlen, ptrs)
        return o, lse

    def backward(self, dout, q, k, v, o, lse, topk_idx, cu_seqlens, batch, max_seqlen, dq_into=None, gate=None,
                 gate_grad=None):
        """(dq, dk, dv), or None when the plan has no backward kernels. q, k, v and topk_idx as the key
        says, all aligned; o and dout of any strides libfsa reads in place; lse contiguous. dq_into: None,
        or a contiguous tensor of q's shape and dtype that the selected dq is added to in place before its
        rounding (fsa_bwd_args.dq_add = dq; the NSA layer's other branches' dq) and that is returned as dq.
        gate, gate_grad: None, or float32 [T, Hq] tensors (fsa_bwd_args.gate, .gate_grad: dout is the
        gradient of gate * o; gate_grad gets rowsum(dout * o))."""
        from . import attention

        if not self.plan.backward:
            return None
        self.lib.require_backward()
        dq = torch.empty(q.shape, dtype=q.dtype, device=self.device) if dq_into is None else dq_into
        dk = torch.empty(k.shape, dtype=k.dtype, device=self.device)
        dv = torch.empty(v.shape, dtype=v.dtype, device=self.device)
        ptrs = [t.data_ptr() for t in (q, k, v, o, dout, dq, dk, dv, topk_idx, cu_seqlens, lse)]
        o_view, dout_view = attention._head_strides(o), attention._head_strides(dout)
        add_view = (0, 0, 0) if dq_into is None else (dq.data_ptr(),) + self.views["dq"]
        gate_view, gate_grad_view = attention._float_view(gate), attention._float_view(gate_grad)

        def strides():  # under the entry's lock: the structure is shared by the key's calls
            b = self.bwd.struct
            b.o.token_stride, b.o.head_stride = o_view
            b.dout.token_stride, b.dout.head_stride = dout_view
            b.dq_add.ptr, b.dq_add.token_stride, b.dq_add.head_stride = add_view
            b.gate, b.gate_grad = gate_view, gate_grad_view

        self._call(True, self.bwd, _BWD_PTRS, batch, max_seqlen, ptrs, before=strides)
        return dq, dk, dv


def _in_place(q, k, v, topk_idx):
    """Whether libfsa reads the tensors of this key in place (strides; alignment is checked per call)."""
    from . import attention

    for t in (q, k, v):
        ts, hs = attention._head_strides(t)
        if t.stride(2) != 1 or ts % 8 or hs % 8:
            return False
    return topk_idx.shape[2] == 1 or topk_idx.stride(2) == 1


class _FirstOrderOnly(torch.autograd.Function):
    """Gradients computed under create_graph=True, tied to the inputs they depend on: the kernels have no
    second derivative, so differentiating them raises (as through the custom operators) instead of
    treating them as constants, which is what they would be once the kernels wrote them."""

    @staticmethod
    def forward(ctx, name, n, *tensors):  # tensors: the n inputs, then the gradients
        ctx.name = name
        return tuple(g.clone() for g in tensors[n:])

    @staticmethod
    def backward(ctx, *_):
        raise RuntimeError(f"{ctx.name} has no second derivative: its gradients cannot be differentiated "
                           "(a backward with create_graph=True through them)")


def first_order_only(name, inputs, grads):
    """`grads` (tensors or None), under grad mode (create_graph=True) tied to `inputs` by _FirstOrderOnly."""
    if not torch.is_grad_enabled() or not any(t.requires_grad for t in inputs):
        return grads
    tied = iter(_FirstOrderOnly.apply(name, len(inputs), *inputs, *[g for g in grads if g is not None]))
    return tuple(None if g is None else next(tied) for g in grads)


class _Function(torch.autograd.Function):
    """The fast path's autograd node: cheaper than the custom operator's (no dispatcher round trip)."""

    @staticmethod
    def forward(ctx, q, k, v, topk_idx, cu_seqlens, entry, batch, max_seqlen):
        o, lse = entry.forward(q, k, v, topk_idx, cu_seqlens, batch, max_seqlen)
        ctx.save_for_backward(q, k, v, o, lse, topk_idx, cu_seqlens)
        ctx.entry, ctx.batch, ctx.max_seqlen = entry, batch, max_seqlen
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        q, k, v, o, lse, topk_idx, cu_seqlens = ctx.saved_tensors
        e = ctx.entry
        out = None
        if e.gen == _generation[0]:  # else clear_plans() destroyed the entry's plan since the forward
            from . import attention

            do = attention._kernel_ready(do)
            out = e.backward(do, q, k, v, o, lse, topk_idx, cu_seqlens, ctx.batch, ctx.max_seqlen)
        if out is None:  # the operator makes the plan again, or raises the clear error
            out = torch.ops.fsa_jit.selected_attention_bwd(do, q, k, v, o, lse, topk_idx, cu_seqlens,
                                                           *_op_args(e, ctx.max_seqlen), e.op_call[5])
        dq, dk, dv = out
        need = ctx.needs_input_grad
        grads = first_order_only("fsa_jit.selected_attention", (q, k, v, do),
                                 (dq if need[0] else None, dk if need[1] else None, dv if need[2] else None))
        return grads + (None,) * 5


def _op_args(e, max_seqlen):
    block_size, scale, algo, layout, limit, _ = e.op_call
    return block_size, scale, max_seqlen, algo, layout, limit


def selected_attention(q, k, v, topk_idx, cu_seqlens, block_size, scale, max_seqlen, algorithm,
                       topk_layout, workspace_limit, validate):
    """(o, lse) through the fast path, or None: the caller then goes through the custom operator."""
    if torch.compiler.is_compiling():  # first: dynamo folds it, and traces nothing below
        return None
    T = torch.Tensor
    if not (type(q) is T and type(k) is T and type(v) is T and type(topk_idx) is T and type(cu_seqlens) is T):
        return None  # a subclass (fake tensors, DTensor, Parameter ...) or not a tensor
    if q.is_nested or k.is_nested or v.is_nested or topk_idx.is_nested or cu_seqlens.is_nested:
        return None  # no sizes to key on: the operator path refuses it by name
    if not (type(block_size) is int and (scale is None or type(scale) is float) and type(algorithm) is str
            and (max_seqlen is None or type(max_seqlen) is int) and type(validate) is bool
            and (topk_layout is None or type(topk_layout) is str)):
        return None
    if _modes_active():
        return None
    if workspace_limit is None:
        limit = 0
    else:
        try:
            limit = _lib.parse_workspace_limit(workspace_limit)
        except (TypeError, ValueError):
            return None  # the operator path raises it, after the checks that come first
    grads = q.requires_grad or k.requires_grad or v.requires_grad  # check_arguments' backward-only check
    needs_backward = grads and torch.is_grad_enabled()  # the operator runs without grad: decided here
    found = lookup(q, k, v, topk_idx, cu_seqlens, block_size, scale, max_seqlen, algorithm, topk_layout, limit,
                   validate, needs_backward)
    if found is None:
        return None
    e, batch, max_seqlen = found
    if needs_backward:
        return _Function.apply(q, k, v, topk_idx, cu_seqlens, e, batch, max_seqlen)
    return e.forward(q, k, v, topk_idx, cu_seqlens, batch, max_seqlen)


def lookup(q, k, v, topk_idx, cu_seqlens, block_size, scale, max_seqlen, algorithm, topk_layout, limit, validate,
           needs_backward):
    """(entry, batch, max_seqlen) for a call of plain tensors and parameters (as selected_attention found
    them; limit in bytes), or None when the call must go through the operator. needs_backward: whether
    the entry's plan must have the backward kernels (the NSA layer decides it for its own node)."""
    grads = q.requires_grad or k.requires_grad or v.requires_grad
    key = (q.shape, k.shape, v.shape, topk_idx.shape, q.stride(), k.stride(), v.stride(), topk_idx.stride(),
           q.dtype, k.dtype, v.dtype, topk_idx.dtype, cu_seqlens.dtype,
           q.device, k.device, v.device, topk_idx.device, cu_seqlens.device,
           block_size, scale, algorithm, topk_layout, limit, validate, grads, needs_backward)
    e = _entries.get(key)
    if e is None or e.gen != _generation[0]:
        e = _make_entry(key, q, k, v, topk_idx, cu_seqlens, block_size, scale, max_seqlen, algorithm,
                        topk_layout, limit, validate, needs_backward)
        if e is None:
            return None
    # What the key does not fix: cu_seqlens' length and layout, max_seqlen, the pointers' alignment.
    t_len = e.t_len
    cs = cu_seqlens.shape
    if len(cs) != 1 or not 2 <= cs[0] <= t_len + 1 or not cu_seqlens.is_contiguous():
        return None
    if max_seqlen is None:
        max_seqlen = 0
    elif not 0 <= max_seqlen <= t_len:
        return None
    if (q.data_ptr() | k.data_ptr() | v.data_ptr()) % 16:
        return None
    # A view with the negative bit keeps the unnegated values in memory: the operator resolves it.
    if q.is_neg() or k.is_neg() or v.is_neg() or topk_idx.is_neg() or cu_seqlens.is_neg():
        return None
    return e, cs[0] - 1, max_seqlen


def _make_entry(key, q, k, v, topk_idx, cu_seqlens, block_size, scale, max_seqlen, algorithm,
                topk_layout, limit, validate, needs_backward):
    # The full checks (raise as the operator path would), then only what libfsa reads in place is cached.
    from . import attention

    layout, algo = attention.check_arguments(q, k, v, topk_idx, cu_seqlens, block_size, scale, max_seqlen,
                                             algorithm, topk_layout, backward=needs_backward)
    if q.shape[0] == 0 or not _in_place(q, k, v, topk_idx):
        return None
    return _insert(key, _Entry(_lib.get(), q, k, v, topk_idx, layout, algo, block_size, scale, limit, validate,
                               needs_backward))


def _insert(key, e):
    with _lock:
        if len(_entries) >= MAX_ENTRIES:
            _entries.clear()
        _entries[key] = e
    return e


def op_entry(q, k, v, topk_idx, block_size, scale, algo, layout, limit, backward, validate):
    """The entry the custom operators use (their arguments were checked by selected_attention; tensors
    already made readable in place): the plan, the structures and workspace sizes of the key."""
    key = ("op", q.shape, k.shape, v.shape, topk_idx.shape, q.stride(), k.stride(), v.stride(), topk_idx.stride(),
           q.dtype, q.device, block_size, scale, algo, layout, limit, backward, validate)
    e = _entries.get(key)
    if e is None or e.gen != _generation[0]:
        e = _insert(key, _Entry(_lib.get(), q, k, v, topk_idx, layout, algo, block_size, scale, limit, validate,
                                backward))
    return e
