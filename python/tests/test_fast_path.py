"""The eager fast path of selected_attention (fsa_jit/_fast.py), without a GPU: a fake libfsa records
the argument structure of each call, CPU tensors stand in for CUDA ones (the device check is the only
check that is relaxed). What the cache could get wrong: a stale check, stale pointers or strides, a
stale plan after clear_plans(). test_gpu.py runs the same path against the operator on the GPU."""

import ctypes

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("torch.library.custom_op needs torch 2.4", allow_module_level=True)

import fsa_jit  # noqa: E402
from fsa_jit import _fast, _lib, attention  # noqa: E402


class FakeLib:
    has_backward = True

    def __init__(self):
        self.calls = []
        self.status = 0

    def fsa_selected_attention_fwd(self, handle, ref, stream):
        a = ref._obj
        self.calls.append({name: getattr(a, name) for name in ("total_tokens", "batch", "max_seqlen", "cu_seqlens",
                                                               "lse", "workspace", "workspace_bytes")}
                          | {name: (getattr(a, name).ptr, getattr(a, name).token_stride, getattr(a, name).head_stride)
                             for name in ("q", "k", "v", "o", "topk")} | {"handle": handle})
        return self.status

    def fsa_selected_attention_bwd(self, handle, ref, stream):
        a = ref._obj
        self.calls.append({"bwd": True, "handle": handle, "batch": a.batch, "max_seqlen": a.max_seqlen,
                           "lse": a.lse, "workspace": a.workspace, "workspace_bytes": a.workspace_bytes}
                          | {name: (getattr(a, name).ptr, getattr(a, name).token_stride, getattr(a, name).head_stride)
                             for name in ("q", "k", "v", "o", "dout", "dq", "dk", "dv", "topk")})
        return self.status

    def check(self, status, function=None):
        if status:
            raise _lib.FsaError(status, "FAKE", "fake failure", function)

    def require_backward(self):
        pass


class FakePlan:
    def __init__(self, n, backward=False):
        self.handle = 1000 + n
        self.backward = backward

    def workspace_bytes(self, lib, total_tokens, batch, backward=False):
        return 256 * batch


@pytest.fixture
def fake(monkeypatch):
    lib = FakeLib()
    counts = {"check": 0, "plan": 0}
    check = attention.check_arguments

    def check_on_cpu(*args, **kwargs):
        counts["check"] += 1
        return check(*args, **kwargs, require_cuda=False)

    def get_plan(*args, **kwargs):
        counts["plan"] += 1
        return FakePlan(counts["plan"], backward=args[11])

    monkeypatch.setattr(_lib, "get", lambda: lib)
    monkeypatch.setattr(attention, "check_arguments", check_on_cpu)
    monkeypatch.setattr(attention, "_get_plan", get_plan)
    monkeypatch.setattr(_fast, "_raw_stream", lambda index: 0)
    _fast.invalidate()
    yield lib, counts
    _fast.invalidate()


def problem(T=40, Hq=4, Hkv=2, D=32, K=3, dtype=torch.bfloat16, cu=(0, 16, 40)):
    return dict(q=torch.randn(T, Hq, D).to(dtype), k=torch.randn(T, Hkv, D).to(dtype),
                v=torch.randn(T, Hkv, D).to(dtype), topk_idx=torch.zeros(Hkv, T, K, dtype=torch.int32),
                cu_seqlens=torch.tensor(cu, dtype=torch.int32), block_size=16)


def fast(p, **kw):
    call = dict(scale=None, max_seqlen=None, algorithm="auto", topk_layout=None, workspace_limit=None, validate=False) | kw
    return _fast.selected_attention(p["q"], p["k"], p["v"], p["topk_idx"], p["cu_seqlens"], p["block_size"], **call)


def test_a_second_call_of_the_same_key_skips_the_checks_and_writes_its_own_pointers(fake):
    lib, counts = fake
    p1, p2 = problem(), problem(cu=(0, 5, 9, 40))
    o1 = fsa_jit.selected_attention(**p1, max_seqlen=24)
    o2, lse2 = fsa_jit.selected_attention(**p2, return_lse=True)
    assert counts == {"check": 1, "plan": 1}
    c1, c2 = lib.calls
    assert c1["handle"] == c2["handle"] == 1001
    assert (c1["batch"], c1["max_seqlen"], c2["batch"], c2["max_seqlen"]) == (2, 24, 3, 0)
    for c, p, o in ((c1, p1, o1), (c2, p2, o2)):
        for name in ("q", "k", "v"):
            assert c[name][0] == p[name].data_ptr()
        assert c["o"][0] == o.data_ptr() and c["topk"][0] == p["topk_idx"].data_ptr()
        assert c["cu_seqlens"] == p["cu_seqlens"].data_ptr()
        assert c["total_tokens"] == 40 and c["q"][1:] == (128, 32) and c["k"][1:] == (64, 32)
        assert c["topk"][1:] == (3, 120)  # [Hkv, T, K]: token stride K, head stride T*K
    assert c2["lse"] == lse2.data_ptr() and o2.shape == (40, 4, 32) and lse2.shape == (4, 40)
    assert c2["workspace_bytes"] == 256 * 3 and c2["workspace"] != 0


def test_a_new_dtype_is_checked_again(fake):
    _, counts = fake
    fsa_jit.selected_attention(**problem())
    p = problem()
    p["q"] = p["q"].float()
    with pytest.raises(TypeError, match="q must be torch.float16 or torch.bfloat16"):
        fsa_jit.selected_attention(**p)
    p = problem()
    p["v"] = p["v"].half()
    with pytest.raises(TypeError, match="same dtype"):
        fsa_jit.selected_attention(**p)
    p = problem()
    p["cu_seqlens"] = p["cu_seqlens"].long()
    with pytest.raises(TypeError, match="cu_seqlens must be torch.int32"):
        fsa_jit.selected_attention(**p)
    assert counts["check"] == 4


def test_new_strides_are_a_new_key_with_their_own_views(fake):
    lib, counts = fake
    fsa_jit.selected_attention(**problem())
    p = problem()
    p["q"] = p["q"].transpose(0, 1).contiguous().transpose(0, 1)  # token stride D, head stride T*D
    fsa_jit.selected_attention(**p)
    assert counts["check"] == 2
    assert lib.calls[0]["q"][1:] == (128, 32) and lib.calls[1]["q"][1:] == (32, 40 * 32)


def test_what_libfsa_cannot_read_in_place_leaves_the_fast_path(fake):
    p = problem()
    p["q"] = torch.randn(40, 4, 64).bfloat16()[..., ::2]  # last dim not contiguous: the operator copies it
    assert fast(p) is None
    p = problem()
    flat = torch.zeros(40 * 4 * 32 + 4, dtype=torch.bfloat16)
    p["q"] = flat[4:].view(40, 4, 32)  # 8 bytes off 16: checked per call, not per key
    fsa_jit.selected_attention(**problem(), max_seqlen=3)
    assert fast(p) is None


def test_a_view_with_the_negative_bit_leaves_the_fast_path(fake):
    # Its memory holds the values unnegated: libfsa would read them so. The operator resolves the bit first.
    fsa_jit.selected_attention(**problem())
    for name in ("q", "k", "v", "topk_idx", "cu_seqlens"):
        p = problem()
        p[name] = torch._neg_view(-p[name])  # the same values, through the negative bit
        assert p[name].is_neg()
        assert fast(p) is None, name
    # And where the binding prepares a tensor for libfsa itself (the NSA node, the backward's dout): a copy.
    q = torch._neg_view(torch.randn(8, 2, 16).bfloat16())
    ready = attention._kernel_ready(q)
    assert not ready.is_neg() and ready.data_ptr() != q.data_ptr() and torch.equal(ready, q)


def test_per_call_values_are_checked_on_every_call(fake):
    _, counts = fake
    fsa_jit.selected_attention(**problem())
    with pytest.raises(ValueError, match="max_seqlen must be in 0..T"):
        fsa_jit.selected_attention(**problem(), max_seqlen=41)
    with pytest.raises(ValueError, match="sequences for only"):
        fsa_jit.selected_attention(**problem(T=40, cu=list(range(42))))
    with pytest.raises(ValueError, match="cu_seqlens must be 1-D"):
        fsa_jit.selected_attention(**problem(cu=(40,)))
    with pytest.raises(TypeError, match="max_seqlen must be a Python int"):
        fsa_jit.selected_attention(**problem(), max_seqlen=torch.tensor(3))
    with pytest.raises(TypeError, match="scale must be a float"):
        fsa_jit.selected_attention(**problem(), scale=True)
    with pytest.raises(ValueError, match="workspace_limit"):
        fsa_jit.selected_attention(**problem(), workspace_limit="lots")
    p = problem()
    p["cu_seqlens"] = torch.tensor([0, 0, 16, 0, 40], dtype=torch.int32)[::2]  # not contiguous: the operator copies
    assert fast(p) is None


def test_requires_grad_and_grad_mode_are_part_of_the_key(fake):
    # The backward's head-dim rule applies to calls that will have a backward: inputs that require grad,
    # in grad mode.
    p = problem(D=144)
    p["v"] = torch.randn(40, 2, 208).bfloat16()
    fsa_jit.selected_attention(**p)
    p["q"].requires_grad_()
    with torch.no_grad():  # no backward: the forward takes these dims
        fsa_jit.selected_attention(**p)
    with pytest.raises(ValueError, match="multiples of 32"):
        fsa_jit.selected_attention(**p)


def test_clear_plans_and_set_tuning_drop_the_entries(fake, monkeypatch):
    lib, counts = fake
    monkeypatch.setattr(_lib, "_library", None)  # clear_plans destroys nothing of the fake
    fsa_jit.selected_attention(**problem())
    attention.clear_plans()
    fsa_jit.selected_attention(**problem())
    attention.set_tuning(None)
    fsa_jit.selected_attention(**problem())
    assert counts == {"check": 3, "plan": 3}
    assert [c["handle"] for c in lib.calls] == [1001, 1002, 1003]


def test_a_failing_call_raises(fake):
    lib, _ = fake
    lib.status = _lib.FSA_STATUS_UNSUPPORTED
    with pytest.raises(_lib.FsaError, match="fake failure"):
        fsa_jit.selected_attention(**problem())


def test_fake_tensors_subclasses_and_odd_parameter_types_take_the_operator(fake):
    p = problem()
    assert fast(p, scale=1) is None  # an int scale: valid, but not the fast path's exact types
    assert fast(p | {"block_size": True}) is None
    assert fast(p | {"q": torch.nn.Parameter(p["q"])}) is None
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        assert fast(problem()) is None


def test_a_default_device_mode_keeps_the_fast_path_and_other_function_modes_leave_it(fake):
    # torch.set_default_device and `with torch.device(...)` install a function mode that only changes where
    # factory functions allocate: the fast path names every device, so it stays; any other mode leaves it.
    p = problem()
    assert fast(p) is not None
    with torch.device("cpu"):
        assert fast(p) is not None
    from torch.overrides import TorchFunctionMode

    class Watching(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with torch.device("cpu"), Watching():
        assert fast(p) is None
    with Watching():
        assert fast(p) is None


def test_the_operator_reuses_its_entry_and_writes_each_calls_pointers(fake):
    lib, counts = fake
    p = problem()
    args = (p["q"], p["k"], p["v"], p["topk_idx"], p["cu_seqlens"], 16, 0.0, 24, 0, "hkt", 0, False, False)
    o1, _ = torch.ops.fsa_jit.selected_attention_fwd(*args)
    p2 = problem()
    o2, lse2 = torch.ops.fsa_jit.selected_attention_fwd(p2["q"], p2["k"], p2["v"], p2["topk_idx"], p2["cu_seqlens"],
                                                        *args[5:])
    assert counts["plan"] == 1 and counts["check"] == 2  # the operator checks each call's metadata itself
    c1, c2 = lib.calls
    assert c1["o"][0] == o1.data_ptr() and c2["o"][0] == o2.data_ptr() and c2["lse"] == lse2.data_ptr()
    assert c2["q"][0] == p2["q"].data_ptr() and c2["max_seqlen"] == 24 and c2["batch"] == 2
    # A view libfsa cannot read in place is copied inside the operator: the copy's pointer and strides.
    q = torch.randn(40, 4, 64).bfloat16()[..., ::2]
    torch.ops.fsa_jit.selected_attention_fwd(q, *args[1:])
    c3 = lib.calls[-1]
    assert c3["q"][0] != q.data_ptr() and c3["q"][1:] == (128, 32) and counts["plan"] == 1  # same key as p's


def test_a_call_the_fast_path_leaves_goes_through_the_operator(fake):
    lib, counts = fake
    fsa_jit.selected_attention(**problem(), scale=1)  # an int scale: the operator (valid all the same)
    assert counts == {"check": 2, "plan": 1} and len(lib.calls) == 1  # the function's checks, then the operator's
    assert not [key for key in _fast._entries if key[0] != "op"]


def test_the_backward_writes_its_own_pointers_and_survives_clear_plans(fake, monkeypatch):
    lib, counts = fake
    monkeypatch.setattr(_lib, "_library", None)
    p = problem()
    xs = [p[n].requires_grad_() for n in ("q", "k", "v")]
    o, lse = fsa_jit.selected_attention(**p, return_lse=True, max_seqlen=24)
    assert o.grad_fn is not None and not lse.requires_grad
    do = torch.randn(40, 4, 64).bfloat16()[..., ::2]  # a gradient libfsa cannot read in place: copied
    dq, dk, dv = torch.autograd.grad(o, xs, do)
    fwd, bwd = lib.calls
    assert bwd["bwd"] and bwd["handle"] == fwd["handle"] and (bwd["batch"], bwd["max_seqlen"]) == (2, 24)
    assert bwd["o"][0] == o.data_ptr() and bwd["lse"] == lse.data_ptr() and bwd["q"][0] == p["q"].data_ptr()
    assert bwd["dq"][0] == dq.data_ptr() and bwd["dv"][0] == dv.data_ptr() and bwd["dout"][1:] == (128, 32)
    assert bwd["dout"][0] != do.data_ptr()
    for name, g in (("dq", dq), ("dk", dk), ("dv", dv)):
        assert bwd[name][1:] == (g.stride(0), g.stride(1))
    o = fsa_jit.selected_attention(**p)
    attention.clear_plans()  # between the forward and its backward: the operator makes the plan again
    torch.autograd.grad(o, xs[:1], torch.ones_like(o))
    assert counts["plan"] == 2 and lib.calls[-1]["bwd"] and lib.calls[-1]["handle"] == 1002


def test_the_backward_writes_each_gradients_strides_when_values_are_narrower(fake):
    lib, _ = fake
    p = problem()
    p["v"] = torch.randn(40, 2, 16).bfloat16()  # Dv 16 against Dk 32
    xs = [p[n].requires_grad_() for n in ("q", "k", "v")]
    o = fsa_jit.selected_attention(**p)
    dq, dk, dv = torch.autograd.grad(o, xs, torch.ones_like(o))
    bwd = lib.calls[-1]
    assert bwd["bwd"] and dv.shape == (40, 2, 16)
    assert bwd["workspace_bytes"] == 256 * 2 and bwd["workspace"] != 0  # the plan's size for a batch of 2
    for name, g in (("dq", dq), ("dk", dk), ("dv", dv)):
        assert bwd[name] == (g.data_ptr(), g.stride(0), g.stride(1))


def look_up(p, **kw):
    call = dict(scale=None, max_seqlen=None, algorithm="auto", topk_layout=None, limit=0, validate=False,
                needs_backward=False) | kw
    return _fast.lookup(p["q"], p["k"], p["v"], p["topk_idx"], p["cu_seqlens"], p["block_size"], **call)[0]


@pytest.mark.parametrize("change,kw", [
    (lambda p: p | {"topk_idx": torch.zeros(40, 2, 3, dtype=torch.int32).transpose(0, 1)}, {}),  # topk strides
    (lambda p: p | {"topk_idx": torch.zeros(2, 40, 4, dtype=torch.int32)}, {}),  # top-k
    (lambda p: p | {"v": torch.randn(40, 2, 64).bfloat16()}, {}),  # v's head dim
    (lambda p: p | {"v": torch.randn(40, 2, 64).bfloat16()[..., :32]}, {}),  # v's strides
    (lambda p: p | {"cu_seqlens": p["cu_seqlens"].to("meta")}, {}),  # cu_seqlens' device
    (lambda p: p, {"scale": 0.5}),
    (lambda p: p, {"algorithm": "fsa"}),
    (lambda p: p, {"limit": 1 << 30}),
    (lambda p: p, {"validate": True}),
])
def test_a_call_that_differs_in_anything_the_plan_views_or_checks_depend_on_gets_its_own_entry(fake, change, kw):
    _, counts = fake
    p = problem()
    first = look_up(p)
    second = look_up(change(problem()), **kw)
    assert second is not first and counts["check"] == 2


def test_the_layout_a_caller_names_when_hkv_equals_t_is_part_of_the_key(fake):
    # [2, 2, K] reads as [Hkv, T, K] or [T, Hkv, K]: a shared entry would read the selection transposed.
    lib, _ = fake
    p = problem(T=2, Hq=2, Hkv=2, cu=(0, 2))
    fast(p, topk_layout="hkt")
    fast(p, topk_layout="thk")
    assert [c["topk"][1:] for c in lib.calls] == [(3, 6), (6, 3)]  # (token stride, head stride)


@pytest.mark.parametrize("field,other", [("layout", "thk"), ("scale", 0.5), ("backward", True), ("v", None)])
def test_the_operators_entries_are_keyed_by_layout_scale_backward_and_value_shape(fake, field, other):
    _, counts = fake
    p = problem()
    base = dict(q=p["q"], k=p["k"], v=p["v"], topk_idx=p["topk_idx"], block_size=16, scale=0.0, algo=0,
                layout="hkt", limit=0, backward=False, validate=False)
    first = _fast.op_entry(**base)
    second = _fast.op_entry(**base | {field: torch.randn(40, 2, 64).bfloat16() if field == "v" else other})
    assert second is not first and counts["plan"] == 2


@pytest.mark.parametrize("name,narrow,wide", [
    ("v", lambda: torch.randn(40, 2, 64).bfloat16()[..., :32], lambda: torch.randn(40, 2, 64).bfloat16()),
    ("topk_idx", lambda: torch.zeros(2, 40, 4, dtype=torch.int32)[..., :3], lambda: torch.zeros(2, 40, 4, dtype=torch.int32)),
])
def test_shapes_of_the_same_strides_are_different_keys(fake, name, narrow, wide):
    # A view of the first columns has the strides of the whole: a shared entry would keep the narrow call's
    # value head dim or top-k and read the wider tensor with it (or the narrow one past its columns).
    _, counts = fake
    first = look_up(problem() | {name: narrow()})
    second = look_up(problem() | {name: wide()})
    assert second is not first and counts["check"] == 2
    p = problem()
    base = dict(q=p["q"], k=p["k"], v=p["v"], topk_idx=p["topk_idx"], block_size=16, scale=0.0, algo=0,
                layout="hkt", limit=0, backward=False, validate=False)
    op_first = _fast.op_entry(**base | {name: narrow()})
    op_second = _fast.op_entry(**base | {name: wide()})
    assert op_second is not op_first


def test_values_off_16_bytes_leave_the_fast_path_for_the_operators_copy(fake):
    fsa_jit.selected_attention(**problem())
    p = problem()
    flat = torch.zeros(40 * 2 * 32 + 4, dtype=torch.bfloat16)
    p["v"] = flat[4:].view(40, 2, 32)  # 8 bytes off 16: checked per call, not per key
    assert fast(p) is None


@pytest.mark.parametrize("param", [False, True], ids=["fast_path", "operator"])
def test_differentiating_the_gradients_raises_instead_of_treating_them_as_constants(fake, param):
    # A gradient penalty: the kernels have no second derivative, so the penalty's backward must fail (the
    # gradients taken with create_graph=True depend on q, k and v), never contribute zero in silence.
    p = problem()
    xs = [torch.nn.Parameter(p[n]) if param else p[n].requires_grad_() for n in ("q", "k", "v")]
    p.update(q=xs[0], k=xs[1], v=xs[2])
    o = fsa_jit.selected_attention(**p)
    loss = o.float().sum()
    dq, = torch.autograd.grad(loss, xs[0], create_graph=True)
    assert dq.requires_grad
    with pytest.raises(RuntimeError, match="selected_attention|autograd formula"):
        (loss + dq.float().pow(2).sum()).backward()
    # Without create_graph the gradients stay plain tensors.
    o = fsa_jit.selected_attention(**p)
    dq, = torch.autograd.grad(o.float().sum(), xs[0])
    assert not dq.requires_grad and dq.grad_fn is None
