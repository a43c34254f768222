"""The eager fast path of selected_attention (fsa_jit/_fast.py) on the GPU: the same bits as the custom
operator, forward and backward, and nothing stale when a call of a known key comes with other strides,
dtype, sequence boundaries or after clear_plans(). test_gpu.py's CUDA-graph, stream and device tests go
through it too (eager calls take it)."""

import pytest

from helpers import cuda_torch_or_skip

torch = cuda_torch_or_skip()  # skips without CUDA (fails under FSA_TEST_REQUIRE_GPU)

import fsa_jit  # noqa: E402
from fsa_jit import _fast  # noqa: E402
from test_gpu import CASES, TOLERANCE, case, make, reference, view_of  # noqa: E402
from helpers import check_grads, check_rows, random_selection, rel_err  # noqa: E402
from helpers import load_library_or_skip  # noqa: E402

bf16, f16 = torch.bfloat16, torch.float16


def run(inputs, do=None):
    o, lse = fsa_jit.selected_attention(**inputs, return_lse=True)
    if do is None:
        return o, lse
    return (o, lse) + torch.autograd.grad(o, (inputs["q"], inputs["k"], inputs["v"]), do)


def through_operator(monkeypatch, inputs, do=None):
    with monkeypatch.context() as m:
        m.setattr(_fast, "selected_attention", lambda *args, **kwargs: None)
        return run(inputs, do)


def same_bits(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.shape == y.shape and x.dtype == y.dtype
        assert torch.equal(x, y)


@pytest.fixture
def library():
    return load_library_or_skip(backward=True)


@pytest.mark.parametrize("index", [0, 1, 4, 11], ids=["hkt", "thk-transposed", "misaligned", "dv128"])
def test_the_fast_path_gives_the_operators_bits(library, monkeypatch, index, poisoned_outputs):
    c = CASES[index]
    inputs, do = make(c, seed=11)
    _fast.invalidate()
    first = run(inputs, do)  # makes the entry
    assert _fast._entries, "an eager call of plain tensors makes a fast-path entry"
    second = run(inputs, do)  # goes through it (the misaligned q: per call back to the operator)
    operator = through_operator(monkeypatch, inputs, do)
    same_bits(first, operator)
    same_bits(second, operator)
    with torch.no_grad():  # forward only: no autograd node, a forward-only key
        same_bits(run(inputs), operator[:2])
    want_o, _, want_g = reference(inputs, do)
    assert rel_err(second[0], want_o) < TOLERANCE[c["dtype"]][0]
    check_rows(second[0], want_o, TOLERANCE[c["dtype"]][0])
    check_grads(second[2:], want_g, TOLERANCE[c["dtype"]][1], ("dq", "dk", "dv"))


def against_the_reference(v, got, do):
    """A call's (o, lse, dq, dk, dv) against the float64 reference. The operator's bits alone are no
    reference here: the operators run the same cached entries (_fast.op_entry), so an entry served stale
    to both would agree with itself."""
    tol = TOLERANCE[v["q"].dtype]
    want_o, want_lse, want_g = reference(v, do)
    assert rel_err(got[0], want_o) < tol[0]
    check_rows(got[0], want_o, tol[0])
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isneginf(got[1]), torch.isneginf(want_lse))
    assert (got[1][finite].double() - want_lse[finite]).abs().max().item() < 2e-3
    check_grads(got[2:], want_g, tol[1], ("dq", "dk", "dv"))


def test_under_a_default_device_the_fast_path_still_gives_the_operators_bits(library, monkeypatch, poisoned_outputs):
    inputs, do = make(CASES[0], seed=12)
    operator = through_operator(monkeypatch, inputs, do)
    _fast.invalidate()
    with torch.device("cuda"):  # as torch.set_default_device("cuda") does: a function mode
        got = run(inputs, do)
    assert _fast._entries, "the default-device mode keeps the fast path"
    same_bits(got, operator)


def test_a_known_shape_with_other_strides_dtype_or_sequences_is_not_served_stale(library, monkeypatch,
                                                                                  poisoned_outputs):
    c = case(bf16, 64, 2, 2, 32, 4, [100, 60])
    inputs, do = make(c, seed=12)
    _fast.invalidate()
    base = run(inputs, do)
    same_bits(base, through_operator(monkeypatch, inputs, do))
    variants = []
    for how in ("transposed", "sliced"):  # same shape, other strides
        variants.append({**inputs, "q": view_of(inputs["q"].detach(), how).requires_grad_()})
    half = {n: inputs[n].detach().to(f16).requires_grad_() for n in ("q", "k", "v")}
    variants.append({**inputs, **half})  # same shapes, other dtype
    cu = inputs["cu_seqlens"]
    topk = random_selection([0, 40, 90, 160], 2, 4, 32, torch.Generator().manual_seed(3)).to(cu.device)
    variants.append({**inputs, "cu_seqlens": torch.tensor([0, 40, 90, 160], dtype=torch.int32, device=cu.device),
                     "topk_idx": topk, "max_seqlen": 70})  # same T, other sequences
    variants.append({**inputs, "max_seqlen": None})
    for v in variants + variants:  # twice: made, then served from the cache
        d = do.to(v["q"].dtype)
        got = run(v, d)
        same_bits(got, through_operator(monkeypatch, v, d))
        against_the_reference(v, got, d)
    # The original key again, after the others.
    same_bits(run(inputs, do), base)


def test_the_backward_after_clear_plans_still_runs(library, monkeypatch, poisoned_outputs):
    c = CASES[2]
    inputs, do = make(c, seed=13)
    want = through_operator(monkeypatch, inputs, do)
    _fast.invalidate()
    o, lse = fsa_jit.selected_attention(**inputs, return_lse=True)
    fsa_jit.clear_plans()  # the entry's plan is destroyed before the backward
    grads = torch.autograd.grad(o, (inputs["q"], inputs["k"], inputs["v"]), do)
    same_bits((o, lse) + grads, want)


def test_only_q_requiring_grad(library, monkeypatch, poisoned_outputs):
    c = CASES[0]
    inputs, do = make(c, seed=14, requires_grad=False)
    inputs["q"].requires_grad_()
    o = fsa_jit.selected_attention(**inputs)
    (dq,) = torch.autograd.grad(o, (inputs["q"],), do)
    with monkeypatch.context() as m:
        m.setattr(_fast, "selected_attention", lambda *args, **kwargs: None)
        o2 = fsa_jit.selected_attention(**inputs)
        (dq2,) = torch.autograd.grad(o2, (inputs["q"],), do)
    same_bits((o, dq), (o2, dq2))
    # The backward of a call where only q needs a gradient is its own key (no dk, dv wanted): right, too.
    want_o, _, (want_dq, _, _) = reference(inputs, do)
    check_rows(o, want_o, TOLERANCE[c["dtype"]][0])
    check_grads((dq,), (want_dq,), TOLERANCE[c["dtype"]][1], ("dq",))


def test_a_known_shape_on_another_device_is_checked_again(library):
    inputs, _ = make(CASES[0], seed=15, requires_grad=False)
    fsa_jit.selected_attention(**inputs)
    for name in ("cu_seqlens", "topk_idx", "v"):
        with pytest.raises(ValueError, match=f"{name} must be a CUDA tensor"):
            fsa_jit.selected_attention(**{**inputs, name: inputs[name].cpu()})
