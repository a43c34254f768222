"""compressed_attention, window_attention and nsa_attention reject bad arguments
before any device or library call, and their operators trace with fake tensors.

Runs on a CPU-only machine: every check except the device check comes before
it, so CPU tensors reach each of them."""

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("torch.library.custom_op needs torch 2.4", allow_module_level=True)

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import fsa_jit  # noqa: E402
from fsa_jit import _lib, _nsa_node, attention, compressed, window  # noqa: E402
from fsa_jit.nsa import nsa_attention  # noqa: E402
from helpers import on_meta, skip_or_fail  # noqa: E402


@pytest.fixture(autouse=True)
def no_library(monkeypatch):
    """Any use of libfsa, or of a plan cache, fails the test."""

    def reached(*args, **kwargs):
        raise AssertionError("a bad call or a trace reached libfsa")

    monkeypatch.setattr(_lib, "get", reached)
    for module in (attention, compressed, window):
        monkeypatch.setattr(module, "_get_plan", reached)


def cmp_problem(T=40, Tc=3, Hq=4, Hkv=2, Dk=32, Dv=16, dtype=torch.bfloat16, device="cpu"):
    return dict(q=torch.randn(T, Hq, Dk, device=device).to(dtype), k=torch.randn(Tc, Hkv, Dk, device=device).to(dtype),
                v=torch.randn(Tc, Hkv, Dv, device=device).to(dtype),
                cu_seqlens=torch.tensor([0, 10, T], dtype=torch.int32, device=device),
                cu_seqlens_c=torch.tensor([0, 0, Tc], dtype=torch.int32, device=device),
                kernel_size=8, stride=4)


def win_problem(T=12, Hq=4, Hkv=2, Dk=32, Dv=16, dtype=torch.bfloat16):
    return dict(q=torch.randn(T, Hq, Dk).to(dtype), k=torch.randn(T, Hkv, Dk).to(dtype),
                v=torch.randn(T, Hkv, Dv).to(dtype), cu_seqlens=torch.tensor([0, 5, T], dtype=torch.int32), window=4)


def expect(fn, error, match, **call):
    with pytest.raises(error, match=match):
        fn(**call)


# ------------------------------------------------------------ compressed


def test_a_valid_compressed_call_fails_only_on_the_device():
    expect(fsa_jit.compressed_attention, ValueError, r"q must be a CUDA tensor", **cmp_problem(), top_k=4,
           block_size=16, scale=0.1)


@pytest.mark.parametrize("change,error,match", [
    (dict(q=torch.randn(40, 4, 32)), TypeError, r"q must be torch.float16 or torch.bfloat16"),
    (dict(v=torch.randn(3, 2, 16).half()), TypeError, r"v must have q's dtype"),
    (dict(cu_seqlens_c=torch.tensor([0, 0, 3])), TypeError, r"cu_seqlens_c must be torch.int32"),
    (dict(k=torch.randn(3, 2, 16).bfloat16()), ValueError, r"head_dim 32 but k has 16"),
    (dict(v=torch.randn(4, 2, 16).bfloat16()), ValueError, r"same \[Tc, Hkv\]"),
    (dict(k=torch.randn(3, 2, 32).bfloat16()[None]), ValueError, r"k must be 3-D"),
    (dict(q=torch.randn(40, 3, 32).bfloat16()), ValueError, r"multiple of the number of KV heads"),
    (dict(q=torch.randn(40, 34, 32).bfloat16()), ValueError, r"group size 17"),
    (dict(v=torch.randn(3, 2, 24).bfloat16()), ValueError, r"value_dim 24 is not supported"),
    (dict(cu_seqlens_c=torch.tensor([0, 3], dtype=torch.int32)), ValueError, r"one entry per entry of cu_seqlens"),
    (dict(kernel_size=0), ValueError, r"kernel_size must be 1..4096"),
    (dict(stride=9), ValueError, r"stride must be 1..8"),
    (dict(stride=2.0), TypeError, r"stride must be an int"),
    (dict(scale=-1.0), ValueError, r"scale must be a positive finite number"),
    (dict(top_k=65), ValueError, r"top_k must be 0..64"),
    (dict(top_k=4, block_size=24), ValueError, r"block_size 24 must be a multiple of stride 4 with block_size / stride a power"),
    (dict(top_k=4, block_size=512), ValueError, r"a power of two up to 64"),
    (dict(top_k=4, block_size=16, init_blocks=-1), ValueError, r"init_blocks must be >= 0"),
])
def test_bad_compressed_arguments(change, error, match):
    expect(fsa_jit.compressed_attention, error, match, **{**cmp_problem(), **change})


def test_the_selection_limits_strides_per_kernel():
    p = cmp_problem()
    p.update(kernel_size=300, stride=4)
    expect(fsa_jit.compressed_attention, ValueError, r"at most 64 strides per kernel", **p, top_k=2, block_size=16)


def test_compressed_offsets_on_another_device():
    if not torch.cuda.is_available():
        skip_or_fail("needs a CUDA device to mix devices")
    p = cmp_problem(device="cuda")
    p["cu_seqlens_c"] = p["cu_seqlens_c"].cpu()
    expect(fsa_jit.compressed_attention, ValueError, r"cu_seqlens_c must be a CUDA tensor", **p)


# ---------------------------------------------------------------- window


def test_a_valid_window_call_fails_only_on_the_device():
    expect(fsa_jit.window_attention, ValueError, r"q must be a CUDA tensor", **win_problem(), return_lse=True)


@pytest.mark.parametrize("change,error,match", [
    (dict(k=torch.randn(11, 2, 32).bfloat16(), v=torch.randn(11, 2, 16).bfloat16()), ValueError,
     r"q has T=12 tokens but k and v have 11"),
    (dict(window=0), ValueError, r"window must be 1"),
    (dict(window=True), TypeError, r"window must be an int"),
    (dict(window=[4, 4, 4]), ValueError, r"per-head windows: one per query head \(4\), got 3"),
    (dict(window=[4, 0, 4, 4]), ValueError, r"window\[1\] must be 1"),
    (dict(window=range(1, 5)), TypeError, r"window must be an int, or a list, tuple or 1-D tensor of Hq ints, got range"),
    (dict(q=torch.randn(12, 4, 40).bfloat16(), k=torch.randn(12, 2, 40).bfloat16()), ValueError,
     r"head_dim 40 is not supported"),
    (dict(cu_seqlens=torch.tensor([[0, 12]], dtype=torch.int32)), ValueError, r"cu_seqlens must be 1-D"),
])
def test_bad_window_arguments(change, error, match):
    expect(fsa_jit.window_attention, error, match, **{**win_problem(), **change})


# ------------------------------------------------------------------- nsa


def nsa_problem(**change):
    p = cmp_problem(Dv=32)
    p.update(k_cmp=p.pop("k"), v_cmp=p.pop("v"), k=torch.randn(40, 2, 32).bfloat16(), v=torch.randn(40, 2, 32).bfloat16(),
             g_cmp=torch.rand(40, 4), g_sel=torch.rand(40, 4), g_win=0.5, block_size=16, top_k=4, window=8)
    p.update(change)
    return p


def test_a_tensor_of_windows_is_read_on_the_host_once_per_call(monkeypatch):
    # Each read is a host synchronization when the windows are on the GPU: the checks read the one copy.
    reads = []
    tolist = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: reads.append(self.dtype) or tolist(self))
    windows = torch.tensor([8, 8, 8, 8])
    expect(fsa_jit.window_attention, ValueError, r"q must be a CUDA tensor", **{**win_problem(), "window": windows})
    assert len(reads) == 1
    reads.clear()
    expect(nsa_attention, ValueError, r"q must be a CUDA tensor", **nsa_problem(window=windows))
    assert len(reads) == 1


def test_a_valid_nsa_call_fails_only_on_the_device():
    expect(nsa_attention, ValueError, r"q must be a CUDA tensor", **nsa_problem(g_sel=torch.rand(4)))


@pytest.mark.parametrize("change,error,match", [
    (dict(g_cmp=torch.rand(40, 5)), ValueError, r"g_cmp has shape \(40, 5\): a gate of one or two dims must broadcast to \[T, Hq\]"),
    (dict(g_sel=torch.rand(2, 40, 4, 1)), ValueError, r"g_sel has shape"),
    (dict(g_win=torch.ones(40, 4, dtype=torch.int32)), TypeError, r"g_win must be a floating-point tensor"),
    (dict(g_win="0.5"), TypeError, r"g_win must be a tensor"),
    (dict(g_cmp=torch.rand(40, 4).to_sparse()), TypeError, r"g_cmp must be a dense \(strided\) tensor"),
    (dict(k_cmp=torch.randn(3, 2, 32).bfloat16().to_sparse()), TypeError, r"k_cmp must be a dense \(strided\) tensor"),
    (dict(block_size=48), ValueError, r"block_size must be one of"),
    (dict(top_k=0), ValueError, r"top_k must be 1..64"),
    (dict(window=0), ValueError, r"window must be 1"),
    (dict(k_cmp=torch.randn(3, 2, 32).half()), TypeError, r"k_cmp must have q's dtype"),
])
def test_bad_nsa_arguments(change, error, match):
    expect(nsa_attention, error, match, **nsa_problem(**change))


def test_wide_head_dims_with_gradients_must_be_multiples_of_32():
    p = nsa_problem()
    p["q"] = torch.randn(40, 4, 240).bfloat16().requires_grad_()
    p["k"], p["k_cmp"] = torch.randn(40, 2, 240).bfloat16(), torch.randn(3, 2, 240).bfloat16()
    p["v"], p["v_cmp"] = torch.randn(40, 2, 96).bfloat16(), torch.randn(3, 2, 96).bfloat16()
    expect(nsa_attention, ValueError, r"when together over 320, both must be multiples of 32", **p)
    p["q"] = p["q"].detach()  # no gradients: a valid call up to the device check
    expect(nsa_attention, ValueError, r"q must be a CUDA tensor", **p)
    # A gradient of any input, a gate's or a compressed key's, runs the selected backward too.
    for name in ("g_sel", "k_cmp", "v_win"):
        q = dict(p)
        if name == "v_win":
            q["k_win"], q["v_win"] = p["k"].clone(), p["v"].clone().requires_grad_()
        else:
            q[name] = (torch.rand(40, 4) if name == "g_sel" else p[name].clone()).requires_grad_()
        expect(nsa_attention, ValueError, r"when together over 320, both must be multiples of 32", **q)


# ------------------------------------------- the eager node's checked keys


def key_of(**change):
    """_nsa_node.call_key of nsa_problem(**change), with nsa_attention's defaults for what it leaves out."""
    p = dict(dict(init_blocks=1, local_blocks=2, scale=None, max_seqlen=None, workspace_limit=None, k_win=None,
                  v_win=None), **nsa_problem(**change))
    return _nsa_node.call_key(p["q"], p["k"], p["v"], p["k_cmp"], p["v_cmp"], (p["g_cmp"], p["g_sel"], p["g_win"]),
                              p["cu_seqlens"], p["cu_seqlens_c"], p["k_win"], p["v_win"], p["kernel_size"], p["stride"],
                              p["block_size"], p["top_k"], p["window"], p["init_blocks"], p["local_blocks"], p["scale"],
                              p["max_seqlen"], p["workspace_limit"])


def test_calls_of_one_layout_share_a_key_and_every_checked_difference_makes_another():
    same = key_of()
    assert same is not None and key_of() == same  # new tensors, the same layouts and parameters
    for change in (dict(init_blocks=True), dict(top_k=4.0), dict(g_win=0.25), dict(g_win=torch.rand(40, 4)),
                   dict(q=torch.randn(40, 4, 32)), dict(q=torch.randn(40, 8, 32).bfloat16()[:, ::2]),
                   dict(q=torch.randn(40, 4, 32).bfloat16().requires_grad_()), dict(window=[8, 8, 8, 9]),
                   dict(workspace_limit="1G"), dict(k_win=torch.randn(40, 2, 32).bfloat16())):
        assert key_of(**change) not in (None, same), change
    with torch.no_grad():
        assert key_of() not in (None, same)


def test_per_head_windows_key_by_value_and_tensors_of_windows_take_no_key():
    heads = [8, 8, 8, 8]
    before = key_of(window=heads)
    heads[3] = 9  # the same list, changed: another key
    assert key_of(window=heads) != before and key_of(window=[8, 8, 8, 9]) == key_of(window=heads)
    assert key_of(window=[8, 8, 8, True]) != key_of(window=[8, 8, 8, 1])
    assert key_of(window=torch.tensor([8, 8, 8, 8])) is None
    assert key_of(q=torch.nn.Parameter(torch.randn(40, 4, 32).bfloat16())) is None  # a subclass
    assert key_of(top_k=torch.tensor(4)) is None


def test_a_view_with_the_negative_bit_takes_no_key():
    # Its memory holds the values unnegated, which the node would hand to libfsa: the operators resolve it.
    p = nsa_problem()
    for name in ("q", "k_cmp", "cu_seqlens", "g_sel"):
        assert key_of(**{name: torch._neg_view(-p[name])}) is None, name


# ----------------------------------------------------- operators, tracing


def test_the_operators_are_registered_with_fake_and_autograd_kernels():
    for op in ("compressed_attention_fwd", "compressed_attention_bwd", "window_attention_fwd", "window_attention_bwd"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"fsa_jit::{op}", "Meta"), op
    for op in ("compressed_attention_fwd", "window_attention_fwd"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"fsa_jit::{op}", "Autograd"), op


def test_fake_compressed_attention_gives_the_output_shapes():
    mode = FakeTensorMode()
    with mode:
        p = cmp_problem(T=9, Tc=2, Hq=6, Hkv=3, Dk=48, Dv=32, device="cuda")
        p["q"].requires_grad_()
        o, lse, topk = fsa_jit.compressed_attention(**p, top_k=5, block_size=16)
        dq, dk, dv = torch.ops.fsa_jit.compressed_attention_bwd(o, p["q"], p["k"], p["v"], o, lse, p["cu_seqlens"],
                                                                p["cu_seqlens_c"], 8, 4, 0.0, 5, 16, 1, 2, False)
    assert o.shape == (9, 6, 32) and o.dtype == torch.bfloat16 and o.requires_grad
    assert lse.shape == (6, 9) and lse.dtype == torch.float32 and not lse.requires_grad
    assert topk.shape == (9, 3, 5) and topk.dtype == torch.int32 and not topk.requires_grad
    assert dq.shape == (9, 6, 48) and dk.shape == (2, 3, 48) and dv.shape == (2, 3, 32)


def test_fake_window_attention_gives_the_output_shapes():
    with FakeTensorMode():
        q = torch.randn(7, 4, 32, dtype=torch.float16, device="cuda")
        k = torch.randn(7, 1, 32, dtype=torch.float16, device="cuda")
        v = torch.randn(7, 1, 64, dtype=torch.float16, device="cuda")
        o, lse = fsa_jit.window_attention(q, k, v, torch.tensor([0, 7], dtype=torch.int32, device="cuda"), 3,
                                          return_lse=True)
    assert o.shape == (7, 4, 64) and o.dtype == torch.float16 and lse.shape == (4, 7)


def test_fake_window_attention_with_per_head_windows_is_differentiable():
    with FakeTensorMode():
        q = torch.randn(7, 4, 32, dtype=torch.bfloat16, device="cuda", requires_grad=True)
        k = torch.randn(7, 2, 32, dtype=torch.bfloat16, device="cuda", requires_grad=True)
        cu = torch.tensor([0, 7], dtype=torch.int32, device="cuda")
        o, lse = fsa_jit.window_attention(q, k, k, cu, [1, 2, 3, 4], return_lse=True)
        dq, dk, dv = torch.ops.fsa_jit.window_attention_bwd(o, q, k, k, o, lse, cu, 0, [1, 2, 3, 4], 0.0, False)
    assert o.requires_grad and not lse.requires_grad
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == k.shape


def test_nsa_attention_compiles_into_one_graph():
    mode = FakeTensorMode()
    with mode:
        p = nsa_problem()
        p = {n: x.to("cuda") if isinstance(x, torch.Tensor) else x for n, x in p.items()}
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(nsa_attention, backend=backend, fullgraph=True)
    with mode:
        compiled(**p)
    assert len(graphs) == 1
    targets = {str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"}
    for op in ("compressed_attention_fwd", "selected_attention_fwd", "window_attention_fwd"):
        assert any(op in t for t in targets), (op, targets)


# ------------------------------------------- the layer's own checks (review)


@pytest.mark.parametrize("change,name", [
    (dict(v_cmp=torch.randn(3, 2, 16).bfloat16()), "v_cmp"),
    (dict(k_win=torch.randn(40, 2, 32).bfloat16(), v_win=torch.randn(40, 2, 16).bfloat16()), "v_win"),
])
def test_the_three_branches_must_share_the_value_head_dim(change, name):
    expect(nsa_attention, ValueError, rf"{name} has value head dim 16 but v has 32: .*share Dv", **nsa_problem(**change))


@pytest.mark.parametrize("change,error,match", [
    (dict(k_cmp=torch.randn(3, 2, 16).bfloat16()), ValueError, r"q has head_dim 32 but k_cmp has 16"),
    (dict(v_cmp=torch.randn(4, 2, 32).bfloat16()), ValueError, r"k_cmp and v_cmp must have the same \[Tc, Hkv\]"),
    (dict(k_win=torch.randn(39, 2, 32).bfloat16()), ValueError, r"k_win and v must have the same \[T, Hkv\]"),
    (dict(k_win=torch.randn(40, 2, 32).bfloat16(), v_win=torch.randn(40, 2, 32).half()), TypeError,
     r"v_win must have q's dtype"),
    (dict(k_win=torch.randn(40, 1, 32).bfloat16(), v_win=torch.randn(40, 1, 32).bfloat16()), ValueError,
     r"k_cmp has 2 KV heads but k_win has 1"),
])
def test_messages_name_the_compressed_and_window_tensors_the_caller_passed(change, error, match):
    expect(nsa_attention, error, match, **nsa_problem(**change))


@pytest.mark.parametrize("change,error,match", [
    (dict(workspace_limit="bogus"), ValueError, r"workspace_limit: 'bogus' is not a byte count"),
    (dict(max_seqlen=-1), ValueError, r"max_seqlen must be in 0..T = 0..40"),
    (dict(max_seqlen=41), ValueError, r"max_seqlen must be in 0..T = 0..40"),
    (dict(max_seqlen=4.0), TypeError, r"max_seqlen must be a Python int"),
])
def test_the_selected_branchs_workspace_limit_and_max_seqlen_are_checked_before_any_branch_runs(change, error, match,
                                                                                               monkeypatch):
    import fsa_jit.nsa as nsa_module

    ran = []
    monkeypatch.setattr(nsa_module, "compressed_attention", lambda *a, **k: ran.append("compressed"))
    expect(nsa_attention, error, match, **nsa_problem(**change))  # CPU tensors: before the device check, too
    mode = FakeTensorMode()
    with mode:
        p = {n: x.to("cuda") if isinstance(x, torch.Tensor) else x for n, x in nsa_problem(**change).items()}
        expect(nsa_attention, error, match, **p)
    assert ran == []


@pytest.mark.parametrize("change,error,match", [
    (dict(init_blocks=2**32 + 1), ValueError, r"init_blocks 4294967297 is past int32"),
    (dict(local_blocks=2**31), ValueError, r"local_blocks 2147483648 is past int32"),
    (dict(scale=1e-46), ValueError, r"scale 1e-46 is 0 or infinite in float32"),
    (dict(scale=1e39), ValueError, r"scale 1e\+39 is 0 or infinite in float32"),
])
def test_ints_past_int32_and_scales_that_float32_cannot_hold_are_refused(change, error, match):
    expect(nsa_attention, error, match, **nsa_problem(**change))
    expect(fsa_jit.compressed_attention, error, match, **{**cmp_problem(), "top_k": 4, "block_size": 16, **change})


@pytest.mark.parametrize("cu,error,match", [
    (torch.zeros(0, dtype=torch.int32), ValueError, r"cu_seqlens must be 1-D \[batch \+ 1\] with at least 2 entries"),
    (torch.tensor([0], dtype=torch.int32), ValueError, r"at least 2 entries, got shape \(1,\)"),
    (torch.tensor([[0, 40]], dtype=torch.int32), ValueError, r"cu_seqlens must be 1-D"),
    (torch.tensor([0.0, 40.0]), TypeError, r"cu_seqlens must be an integer tensor"),
    ([0, 40], TypeError, r"cu_seqlens must be a torch.Tensor, got list"),
])
def test_compress_mean_takes_a_1d_integer_tensor_of_offsets(cu, error, match):
    from fsa_jit.nsa import compress_mean

    expect(compress_mean, error, match, x=torch.randn(40, 2, 32), cu_seqlens=cu)
    x_cmp, cu_c = compress_mean(torch.randn(40, 2, 32), torch.tensor([0, 40]), kernel_size=8, stride=4)
    assert x_cmp.shape == (9, 2, 32) and cu_c.tolist() == [0, 9]  # int64 offsets are fine


def test_compress_mean_with_no_window_that_fits_stays_differentiable_in_x():
    from fsa_jit.nsa import compress_mean

    x = torch.randn(10, 2, 16, requires_grad=True)
    x_cmp, cu_c = compress_mean(x, torch.tensor([0, 5, 10]), kernel_size=8, stride=4)  # both sequences shorter than 8
    assert x_cmp.shape == (0, 2, 16) and cu_c.tolist() == [0, 0, 0]
    assert x_cmp.requires_grad
    (grad,) = torch.autograd.grad(x_cmp.float().sum(), x)
    assert torch.equal(grad, torch.zeros_like(x))


def on_gpu(p, **elsewhere):
    """nsa_problem's tensors as fake CUDA tensors on cuda:0, those named in elsewhere on that device."""
    return {n: x.to(elsewhere.get(n, "cuda")) if isinstance(x, torch.Tensor) else x for n, x in p.items()}


@pytest.mark.parametrize("name,gate", [("g_sel", lambda: torch.rand(40, 4)), ("g_cmp", lambda: torch.rand(4))])
def test_a_gate_on_another_gpu_is_refused(name, gate):
    with FakeTensorMode():
        p = on_gpu(nsa_problem(**{name: gate()}), **{name: "cuda:1"})
        expect(nsa_attention, ValueError, rf"{name} is on cuda:1 but q is on cuda:0", **p)


@pytest.mark.parametrize("name", ["k_win", "v_win"])
def test_window_keys_or_values_on_another_gpu_are_refused(name):
    with FakeTensorMode():
        change = dict(k_win=torch.randn(40, 2, 32).bfloat16(), v_win=torch.randn(40, 2, 32).bfloat16())
        p = on_gpu(nsa_problem(**change), **{name: "cuda:1"})
        expect(nsa_attention, ValueError, rf"{name} is on cuda:1 but q is on cuda:0", **p)


def test_the_selected_branchs_keys_are_checked_when_the_window_has_its_own():
    change = dict(k=torch.randn(39, 2, 32).bfloat16(), v=torch.randn(39, 2, 32).bfloat16(),
                  k_win=torch.randn(40, 2, 32).bfloat16(), v_win=torch.randn(40, 2, 32).bfloat16())
    expect(nsa_attention, ValueError, r"q has T=40 tokens but k and v have 39", **nsa_problem(**change))


@pytest.mark.parametrize("call,error,match", [
    (dict(stride=0), ValueError, r"stride must be 1..4, got 0"),  # was ZeroDivisionError
    (dict(kernel_size=0, stride=1), ValueError, r"kernel_size must be 1..4096, got 0"),  # was [0, 5, 12]
    (dict(stride=1.5), TypeError, r"stride must be an int, got float"),  # was a float count, truncated to int32
    (dict(kernel_size=True, stride=1), TypeError, r"kernel_size must be an int, got bool"),
    (dict(cu_seqlens=torch.tensor([0, 6, 4, 10], dtype=torch.int32)), ValueError,
     r"cu_seqlens must start at 0 and never fall"),  # was a negative length's count of 0
    (dict(cu_seqlens=torch.tensor([[0, 4, 10]], dtype=torch.int32)), ValueError, r"cu_seqlens must be 1-D"),
    (dict(cu_seqlens=torch.tensor([0.0, 10.0])), TypeError, r"cu_seqlens must be an integer tensor"),
    (dict(cu_seqlens=[0, 4, 10]), TypeError, r"cu_seqlens must be a torch.Tensor, got list"),
    (dict(cu_seqlens=torch.tensor([0, 2**33]), kernel_size=1, stride=1), ValueError,
     r"the compression has 8589934592 tokens: at most 2147483646"),  # was int32's RuntimeError
])
def test_compressed_cu_seqlens_checks_its_arguments_as_compress_mean_does(call, error, match):
    from fsa_jit.nsa import compressed_cu_seqlens

    expect(compressed_cu_seqlens, error, match, **dict(cu_seqlens=torch.tensor([0, 4, 10], dtype=torch.int32),
                                                       kernel_size=4, stride=2) | call)
    assert compressed_cu_seqlens(torch.tensor([0, 4, 10]), 4, 2).tolist() == [0, 1, 3]  # int64 offsets are fine


def test_compress_mean_refuses_integer_x_whose_means_would_be_truncated():
    from fsa_jit.nsa import compress_mean

    expect(compress_mean, TypeError, r"x must be a floating-point tensor, got torch.int32",
           x=torch.randint(0, 3, (40, 2, 4), dtype=torch.int32), cu_seqlens=torch.tensor([0, 40]))


def test_a_nested_tensor_is_refused_by_name_in_every_branch_and_the_layer():
    nested = torch.nested.nested_tensor([torch.randn(10, 4, 32).bfloat16(), torch.randn(30, 4, 32).bfloat16()])
    match = r"q must be a dense \(strided\) tensor, got a nested tensor"
    expect(fsa_jit.compressed_attention, TypeError, match, **{**cmp_problem(), "q": nested})
    expect(fsa_jit.window_attention, TypeError, match, **{**win_problem(), "q": nested})
    expect(nsa_attention, TypeError, match, **nsa_problem(q=nested))


@pytest.mark.parametrize("value", ["no", 0])
def test_validate_is_a_bool_in_every_branch_and_the_layer(value):
    match = rf"validate must be a bool, got {type(value).__name__}"
    expect(fsa_jit.compressed_attention, TypeError, match, **cmp_problem(), validate=value)
    expect(fsa_jit.window_attention, TypeError, match, **win_problem(), validate=value)
    expect(nsa_attention, TypeError, match, **nsa_problem(validate=value))


@pytest.mark.parametrize("value", ["False", 1])
def test_the_return_switches_are_bools_as_validate_is(value):
    # A string such as "False" turned return_topk / return_lse on (a tuple back instead of o).
    match_topk = rf"return_topk must be a bool, got {type(value).__name__}"
    match_lse = rf"return_lse must be a bool, got {type(value).__name__}"
    expect(nsa_attention, TypeError, match_topk, **nsa_problem(return_topk=value))
    expect(fsa_jit.window_attention, TypeError, match_lse, **win_problem(), return_lse=value)
    t = 8
    expect(fsa_jit.selected_attention, TypeError, match_lse, q=torch.randn(t, 2, 16).bfloat16(),
           k=torch.randn(t, 1, 16).bfloat16(), v=torch.randn(t, 1, 16).bfloat16(),
           topk_idx=torch.zeros(1, t, 1, dtype=torch.int32), cu_seqlens=torch.tensor([0, t], dtype=torch.int32),
           block_size=16, return_lse=value)


@pytest.mark.parametrize("block_size", [True, "64", 64.0])
def test_the_layers_block_size_must_be_an_int_before_it_is_one_of_the_sizes(block_size):
    expect(nsa_attention, TypeError, r"block_size must be an int", **nsa_problem(block_size=block_size))


def test_more_kv_heads_than_the_kernels_grid_rows_are_refused_before_the_device():
    # 65536 KV heads of one dim-16 row: the plans would refuse them on a GPU; the binding says so first.
    t, hkv = 1, 65536
    q = torch.randn(t, hkv, 16).bfloat16()
    kv = torch.randn(t, hkv, 16).bfloat16()
    cu = torch.tensor([0, t], dtype=torch.int32)
    expect(fsa_jit.window_attention, ValueError, r"at most 65535 KV heads, got 65536", q=q, k=kv, v=kv,
           cu_seqlens=cu, window=4)
    expect(fsa_jit.compressed_attention, ValueError, r"at most 65535 KV heads, got 65536", q=q, k=kv[:0], v=kv[:0],
           cu_seqlens=cu, cu_seqlens_c=torch.tensor([0, 0], dtype=torch.int32), kernel_size=8, stride=4)


def test_the_module_names_k_or_v_when_their_compression_refuses_them():
    # NSAttention compresses k and v itself: its messages name them, not compress_mean's "x".
    from fsa_jit.nsa import NSAttention
    t = 40
    q, k, v = torch.randn(t, 4, 32).bfloat16(), torch.randn(t, 2, 32).bfloat16(), torch.randn(t, 2, 32).bfloat16()
    cu = torch.tensor([0, t], dtype=torch.int32)
    layer = NSAttention(kernel_size=8, stride=4, block_size=16, top_k=4, window=8)
    expect(layer, TypeError, r"v must be a floating-point tensor", q=q, k=k, v=v.int(), g_cmp=.5, g_sel=.5, g_win=.5,
           cu_seqlens=cu)
    expect(layer, ValueError, r"k has 40 tokens, v has 39 tokens: they must agree", q=q, k=k, v=v[:39], g_cmp=.5,
           g_sel=.5, g_win=.5, cu_seqlens=cu)


def test_windows_and_offsets_read_on_the_host_must_be_dense_tensors_with_values():
    # Read with tolist(): a sparse or meta tensor reached torch's own errors ("Cannot copy out of meta tensor").
    per_head = torch.tensor([64, 64, 64, 64])
    expect(fsa_jit.window_attention, TypeError, r"window must be a dense \(strided\) tensor",
           **{**win_problem(), "window": per_head.to_sparse()})
    expect(fsa_jit.window_attention, ValueError, r"window must hold values .* meta tensor",
           **{**win_problem(), "window": per_head.to("meta")})
    expect(nsa_attention, ValueError, r"window must hold values .* meta tensor", **nsa_problem(window=per_head.to("meta")))
    from fsa_jit.nsa import compress_mean
    expect(compress_mean, ValueError, r"cu_seqlens must hold values .* meta tensor", x=torch.randn(40, 2, 4),
           cu_seqlens=torch.tensor([0, 40], dtype=torch.int32).to("meta"))


def test_more_tokens_or_compressed_tokens_than_libfsa_takes_are_refused():
    # On the meta device (shapes without memory): libfsa takes at most INT32_MAX - 1 of either.
    big = 2**31 - 1
    p = cmp_problem(device="meta")
    expect(fsa_jit.compressed_attention, ValueError, r"k has 2147483647 tokens: at most 2147483646",
           **p | dict(k=torch.empty(big, 2, 32, dtype=torch.bfloat16, device="meta"),
                      v=torch.empty(big, 2, 16, dtype=torch.bfloat16, device="meta")))
    expect(fsa_jit.compressed_attention, ValueError, r"q has 2147483647 tokens: at most 2147483646",
           **p | dict(q=torch.empty(big, 4, 32, dtype=torch.bfloat16, device="meta")))
    w = on_meta(win_problem())
    expect(fsa_jit.window_attention, ValueError, r"q has 2147483647 tokens: at most 2147483646",
           **w | dict(q=torch.empty(big, 4, 32, dtype=torch.bfloat16, device="meta"),
                      k=torch.empty(big, 2, 32, dtype=torch.bfloat16, device="meta"),
                      v=torch.empty(big, 2, 16, dtype=torch.bfloat16, device="meta")))


# The edges a mutation audit of the checks found open: each test fails if the check it names is dropped,
# narrowed or moved by one.


def test_a_compressed_call_refuses_a_negative_count_of_local_blocks():
    expect(fsa_jit.compressed_attention, ValueError, r"local_blocks must be >= 0, got -1", **cmp_problem(), top_k=4,
           block_size=16, local_blocks=-1)


def test_a_compressed_group_of_exactly_16_query_heads_per_kv_head_fails_only_on_the_device():
    expect(fsa_jit.compressed_attention, ValueError, r"q must be a CUDA tensor", **cmp_problem(Hq=32, Hkv=2))


def test_a_window_call_refuses_keys_narrower_than_the_queries():
    # libfsa would read q's 32 columns from rows of 16.
    expect(fsa_jit.window_attention, ValueError, r"q has head_dim 32 but k has 16",
           **win_problem() | dict(k=torch.randn(12, 2, 16).bfloat16()))


def test_a_window_call_refuses_one_sequence_more_than_its_tokens():
    cu = torch.tensor([0, 1, 2, 2], dtype=torch.int32)  # 3 sequences over 2 tokens
    expect(fsa_jit.window_attention, ValueError, r"cu_seqlens describes 3 sequences for only 2 tokens",
           **win_problem(T=2) | dict(cu_seqlens=cu))


def test_compress_mean_refuses_offsets_that_fall_though_they_end_at_t():
    from fsa_jit.nsa import compress_mean

    with pytest.raises(ValueError, match=r"cu_seqlens must rise from 0 to T=10, got \[0, 6, 4, 10\]"):
        compress_mean(torch.randn(10, 2, 16), torch.tensor([0, 6, 4, 10], dtype=torch.int32), 4, 2)
