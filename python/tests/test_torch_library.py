"""selected_attention as torch.library custom operators, checked without a GPU:
fake (meta) implementations, the autograd registration, and a fullgraph
torch.compile capture with fake CUDA tensors. The GPU test (test_gpu.py) runs
the compiled forward and backward against eager."""

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("torch.library.custom_op needs torch 2.4", allow_module_level=True)

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import fsa_jit  # noqa: E402
from fsa_jit import _lib, attention  # noqa: E402


@pytest.fixture(autouse=True)
def no_library(monkeypatch):
    """Tracing must never reach libfsa or create a plan."""

    def reached(*args, **kwargs):
        raise AssertionError("tracing reached libfsa")

    monkeypatch.setattr(_lib, "get", reached)
    monkeypatch.setattr(attention, "_get_plan", reached)


def fake_problem(mode, T=10, Hq=4, Hkv=2, D=32, K=3, layout="thk", requires_grad=True, Dv=None):
    with mode:
        q = torch.randn(T, Hq, D, dtype=torch.bfloat16, device="cuda", requires_grad=requires_grad)
        k = torch.randn(T, Hkv, D, dtype=torch.bfloat16, device="cuda", requires_grad=requires_grad)
        v = torch.randn(T, Hkv, Dv or D, dtype=torch.bfloat16, device="cuda", requires_grad=requires_grad)
        shape = (T, Hkv, K) if layout == "thk" else (Hkv, T, K)
        topk = torch.zeros(shape, dtype=torch.int32, device="cuda")
        cu = torch.tensor([0, 4, T], dtype=torch.int32, device="cuda")
    return q, k, v, topk, cu


def test_both_operators_are_registered():
    assert hasattr(torch.ops.fsa_jit, "selected_attention_fwd")
    assert hasattr(torch.ops.fsa_jit, "selected_attention_bwd")
    for op in ("fsa_jit::selected_attention_fwd", "fsa_jit::selected_attention_bwd"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "Meta"), f"{op} has no fake implementation"
    assert torch._C._dispatch_has_kernel_for_dispatch_key("fsa_jit::selected_attention_fwd", "Autograd")


def test_register_operators_registers_every_operator_in_a_fresh_process():
    # import fsa_jit alone registers nothing (torch is imported on first use); a loaded graph needs them all.
    import subprocess
    import sys

    code = ("import torch, fsa_jit\n"
            "ops = ['selected_attention_fwd', 'selected_attention_bwd', 'compressed_attention_fwd', "
            "'window_attention_fwd', 'nsa_gate_fwd', 'kvcache_attention']\n"
            "before = [hasattr(torch.ops.fsa_jit, op) for op in ops]\n"
            "fsa_jit.register_operators()\n"
            "print(before, [hasattr(torch.ops.fsa_jit, op) for op in ops])\n")
    import os
    from pathlib import Path

    here = str(Path(fsa_jit.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env,
                         cwd="/", timeout=120).stdout
    assert out.strip() == f"{[False] * 6} {[True] * 6}"


def test_fake_forward_gives_the_output_shapes():
    mode = FakeTensorMode()
    q, k, v, topk, cu = fake_problem(mode, T=7, Hq=6, Hkv=3, D=48)
    with mode:
        o, lse = fsa_jit.selected_attention(q, k, v, topk, cu, 16, return_lse=True)
    assert o.shape == (7, 6, 48) and o.dtype == torch.bfloat16 and o.device.type == "cuda" and o.is_contiguous()
    assert lse.shape == (6, 7) and lse.dtype == torch.float32
    assert o.requires_grad and not lse.requires_grad


def test_fake_forward_gives_an_output_as_wide_as_v():
    mode = FakeTensorMode()
    q, k, v, topk, cu = fake_problem(mode, T=7, Hq=6, Hkv=3, D=192, Dv=128)
    with mode:
        o, lse = fsa_jit.selected_attention(q, k, v, topk, cu, 16, return_lse=True)
    assert o.shape == (7, 6, 128) and o.is_contiguous()
    assert lse.shape == (6, 7)


def test_fake_backward_with_a_value_head_dim_gives_gradients_shaped_like_q_k_and_v():
    mode = FakeTensorMode()
    q, k, v, topk, cu = fake_problem(mode, D=64, Dv=128, requires_grad=False)
    with mode:
        o = torch.empty(q.shape[0], q.shape[1], 128, dtype=q.dtype, device="cuda")
        lse = torch.empty(q.shape[1], q.shape[0], dtype=torch.float32, device="cuda")
        dq, dk, dv = torch.ops.fsa_jit.selected_attention_bwd(o, q, k, v, o, lse, topk, cu, 16, 0.0, 0, 0, "thk", 0)
    assert (dq.shape, dk.shape, dv.shape) == ((10, 4, 64), (10, 2, 64), (10, 2, 128))


def test_fake_backward_gives_contiguous_gradients_shaped_like_the_inputs():
    mode = FakeTensorMode()
    q, k, v, topk, cu = fake_problem(mode, requires_grad=False)
    with mode:
        q = q.transpose(0, 1).contiguous().transpose(0, 1)  # a strided view, as the real operator may get
        o = torch.empty(q.shape, dtype=q.dtype, device="cuda")
        lse = torch.empty(q.shape[1], q.shape[0], dtype=torch.float32, device="cuda")
        dq, dk, dv = torch.ops.fsa_jit.selected_attention_bwd(o, q, k, v, o, lse, topk, cu, 16, 0.0, 0, 0, "thk", 0)
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)
    # The real operator allocates them contiguous; the fake must say the same (inductor checks strides).
    assert dq.is_contiguous() and dk.is_contiguous() and dv.is_contiguous()
    assert dq.dtype == dk.dtype == dv.dtype == torch.bfloat16


def test_fullgraph_compile_captures_one_operator_call():
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def f(q, k, v, topk, cu):
        return fsa_jit.selected_attention(q, k, v, topk, cu, 16, scale=0.5, algorithm="nsa", workspace_limit="1G")

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, backend=capture)
    mode = FakeTensorMode()
    q, k, v, topk, cu = fake_problem(mode)
    with mode:
        o = compiled(q, k, v, topk, cu)
    assert o.shape == q.shape
    assert len(graphs) == 1
    calls = [n for n in graphs[0].graph.nodes if n.op == "call_function" and "fsa_jit" in str(n.target)]
    assert len(calls) == 1 and "selected_attention_fwd" in str(calls[0].target)
    # block size, scale, max_seqlen, algorithm, layout, workspace limit, backward, validate
    assert tuple(calls[0].args[5:]) == (16, 0.5, 0, _lib.FSA_ALGORITHM_NSA, "thk", 1 << 30, True, False)


def test_workspace_limit_spellings():
    assert _lib.parse_bytes(None) == 0
    assert _lib.parse_bytes(4096) == 4096
    np = pytest.importorskip("numpy")
    assert _lib.parse_bytes(np.int64(1 << 33)) == 1 << 33 and type(_lib.parse_bytes(np.int64(5))) is int
    assert _lib.parse_bytes("512M") == 512 << 20
    assert _lib.parse_bytes("2g") == 2 << 30
    for bad in ("2GB", "-1", "1.5G", ""):
        with pytest.raises(ValueError):
            _lib.parse_bytes(bad)
    for bad in (True, 1.5):
        with pytest.raises(TypeError):
            _lib.parse_bytes(bad)


def test_workspace_limit_none_is_the_library_default_and_unlimited_is_no_cap():
    assert _lib.parse_workspace_limit(None) == 0  # libfsa's default cap
    assert _lib.parse_workspace_limit(0) == 0
    assert _lib.parse_workspace_limit("512M") == 512 << 20
    assert _lib.parse_workspace_limit("unlimited") == -1
    assert _lib.parse_workspace_limit(" Unlimited ") == -1
    assert _lib.parse_workspace_limit(float("inf")) == -1
    assert _lib.parse_workspace_limit((1 << 63) - 1) == (1 << 63) - 1
    with pytest.raises(ValueError):
        _lib.parse_workspace_limit(1 << 63)  # past the operators' int64
    with pytest.raises(ValueError):
        _lib.parse_workspace_limit("none")
    with pytest.raises(TypeError):
        _lib.parse_workspace_limit(2.5)
    # What the plan's descriptor gets.
    assert _lib.workspace_limit_field(-1) == _lib.FSA_WORKSPACE_UNLIMITED == (1 << 64) - 1
    assert _lib.workspace_limit_field(0) == 0
    assert _lib.workspace_limit_field(4096) == 4096


@pytest.mark.parametrize("bad", [float("-inf"), float("nan")])
def test_a_negative_infinite_or_nan_workspace_limit_is_refused_rather_than_taken_as_no_cap(bad):
    with pytest.raises(TypeError, match=r"workspace_limit must be an int, a string such as '2G', or None"):
        _lib.parse_workspace_limit(bad)
