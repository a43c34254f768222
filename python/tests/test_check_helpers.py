"""The GPU tests' own checks, on the CPU: the per-row comparison (helpers.check_rows), the one-step comparison
(helpers.assert_one_rounding_step) and the poisoned
outputs (conftest.py: poisoned_outputs) must catch what they are there to catch."""

import importlib

import pytest

torch = pytest.importorskip("torch")

from helpers import (POISON_INT32, assert_one_rounding_step, check_grads, check_rows, cu_seqlens_of,  # noqa: E402
                     random_selection, rel_err)


def rows(T=64, H=4, D=32, seed=0):
    return torch.randn(T, H, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_rows_within_the_tolerance_pass():
    want = rows()
    check_rows(want * (1 + 5e-3), want, 1e-2)


def test_one_wrong_row_fails_although_the_whole_tensor_norm_passes():
    want = rows()
    got = want.clone()
    got[17, 2] = 0  # one of 256 rows left unwritten (zero)
    assert rel_err(got, want) < 1e-1  # the whole-tensor norm sees it as a small error
    with pytest.raises(AssertionError, match=r"1 of 256 \(token, head\) rows .* first at token 17, head 2"):
        check_rows(got, want, 1e-1 / 3)


def test_a_nan_row_fails():
    want = rows()
    got = want.clone()
    got[3, 1, 5] = float("nan")
    with pytest.raises(AssertionError, match="first at token 3, head 1"):
        check_rows(got, want, 1e-2)


def test_rows_without_keys_must_be_zero_and_small_rows_are_judged_against_a_tenth_of_the_rms():
    want = rows()
    want[5, 0] = 0  # a row without visible keys
    want[6, 1] *= 1e-6  # a tiny row: its error counts against 0.1 x the rms row norm, not its own norm
    got = want.clone()
    got[6, 1] += 1e-4
    check_rows(got, want, 1e-2)
    got[5, 0, 0] = 0.5  # 0.5 / (0.1 x about sqrt(32)) is far over 3 x 1e-2
    with pytest.raises(AssertionError, match="first at token 5, head 0"):
        check_rows(got, want, 1e-2)


def test_gradient_rows_are_judged_against_the_rms_row_and_a_gate_gradient_is_rows_of_one():
    want = rows()
    want[6, 1] *= 1e-3  # dq of a query that sees one key: about 0, plus what the rounded o leaves in it
    got = want.clone()
    got[6, 1] += 0.02 * want.norm(dim=-1).square().mean().sqrt() / want.shape[-1] ** 0.5
    with pytest.raises(AssertionError, match="first at token 6, head 1"):
        check_rows(got, want, 1e-2)  # against a tenth of the rms row: too strict for gradients
    check_rows(got, want, 1e-2, floor=1.0)
    gate = want[..., 0]  # [T, H]: one value per row
    wrong = gate.clone()
    wrong[9, 3] = -wrong[9, 3] + 1.0
    with pytest.raises(AssertionError, match="first at token 9, head 3"):
        check_rows(wrong, gate, 1e-2, floor=1.0)


def test_check_grads_finds_one_wrong_gradient_row_that_the_whole_tensor_norm_lets_pass():
    # test_gpu.py's case bf16-d256-hkv1-g16-bk32-k5 (2 sequences, 214 tokens, 16 query heads), in float64 on
    # the CPU: one dq row of 3424 zero stays under the whole tensor's bf16 gradient tolerance 2e-2, which is
    # all test_backward checked; the per-row check names it, and the rows of a token that forgot a block.
    from fsa_jit.reference import selected_attention_reference

    gen = torch.Generator().manual_seed(1)
    cu = cu_seqlens_of([64, 150])
    T, Hkv, G, D, BK, K = cu[-1], 1, 16, 256, 32, 5
    q = torch.randn(T, Hkv * G, D, generator=gen).to(torch.bfloat16).double().requires_grad_()
    k = torch.randn(T, Hkv, D, generator=gen).to(torch.bfloat16).double().requires_grad_()
    v = torch.randn(T, Hkv, D, generator=gen).to(torch.bfloat16).double().requires_grad_()
    topk = random_selection(cu, Hkv, K, BK, gen)
    do = torch.randn(T, Hkv * G, D, generator=gen).to(torch.bfloat16).double()
    cu_t = torch.tensor(cu, dtype=torch.int32)

    def grads(sel):
        o = selected_attention_reference(q, k, v, sel, cu_t, BK)
        return torch.autograd.grad(o, (q, k, v), do)

    want = grads(topk)
    check_grads(want, want, 2e-2, ("dq", "dk", "dv"))
    zero_row = want[0].clone()
    zero_row[T // 2, G - 1] = 0
    assert rel_err(zero_row, want[0]) < 2e-2
    with pytest.raises(AssertionError, match=f"dq: 1 of {T * G} .* first at token {T // 2}, head {G - 1}"):
        check_grads((zero_row,), want[:1], 2e-2, ("dq",))
    # A small key row dropped whole: under the floor's reach (its norm a few percent of the rms row), caught as a
    # row of zeros where the reference's is not.
    dk_norm = want[1].norm(dim=-1)
    rms = dk_norm.square().mean().sqrt()
    small = ((dk_norm > 1e-3 * rms) & (dk_norm < 3 * 2e-2 * rms)).nonzero()
    assert len(small) > 0, "the case has key rows small against the rms"
    token, head = (int(i) for i in small[0])
    dropped_key = want[1].clone()
    dropped_key[token, head] = 0
    check_rows(dropped_key, want[1], 2e-2, what="dk", floor=1.0)  # what the floor alone lets through
    with pytest.raises(AssertionError, match=f"dk: 1 rows are all zeros .* first at token {token}, head {head}"):
        check_grads((want[0], dropped_key), want[:2], 2e-2, ("dq", "dk"))
    fewer = topk.clone()
    t = T - 1
    fewer[0, t, int((fewer[0, t] >= 0).nonzero()[-1])] = -1  # the last token forgets one of its blocks
    dropped = grads(fewer)
    with pytest.raises(AssertionError, match=f"{G} of {T * G} .* first at token {t}, head 0"):
        check_rows(dropped[0], want[0], 2e-2, what="dq", floor=1.0)  # the rows that token's heads


def test_the_poisoned_outputs_fixture_fills_what_the_bindings_modules_allocate(poisoned_outputs):
    compressed = importlib.import_module("fsa_jit.compressed")
    o = compressed.torch.empty((3, 2, 8), dtype=torch.bfloat16)
    topk = compressed.torch.empty((3, 1, 4), dtype=torch.int32)
    compressed.torch.empty(64, dtype=torch.uint8)  # a workspace, not an output: neither filled nor listed
    assert torch.isnan(o).all() and bool((topk == POISON_INT32).all())
    assert poisoned_outputs == [(torch.bfloat16, (3, 2, 8)), (torch.int32, (3, 1, 4))]


def neighbour(x, steps):
    """x moved `steps` representable values away from zero, element by element (x has no zeros)."""
    bits = x.view(torch.int16)
    return (bits + steps).view(x.dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_neighbours_in_the_dtype_pass_and_two_steps_fail(dtype):
    want = rows(D=16).to(dtype)
    want[want == 0] = 1
    got = want.clone()
    got[::3] = neighbour(want[::3], 1)
    assert assert_one_rounding_step(got, want, "dk", terms=64) == want[::3].numel()
    assert assert_one_rounding_step(want, want, "dk", terms=64) == 0
    got[5, 1, 2] = neighbour(want[5, 1, 2], 2)
    with pytest.raises(AssertionError, match=r"dk: 1 of 4096 elements differ by more than one step .* first at \(5, 1, 2\)"):
        assert_one_rounding_step(got, want, "dk", terms=64)


def test_a_step_is_one_representable_value_and_near_zero_the_floors():
    want = torch.tensor([1.0, 1.0, 0.0, 1e-6] + [1.0] * 96, dtype=torch.bfloat16)
    got = want.clone()
    got[0] = 1.0 - 2**-8  # the neighbour below 1
    got[1] = 1.0 - 2**-7  # two values below 1, although within 1's own step above it
    with pytest.raises(AssertionError, match="1 of 100 elements .* first at \\(1,\\)"):
        assert_one_rounding_step(got, want, "dv", terms=4096)
    got[1] = 1.0 + 2**-7
    # Near zero the step is the floor's, not zero's: the floor is 16 x sqrt(4096) x 2^(7 - 24) = 2^-7 of the
    # rms 0.99, a magnitude whose step is 2^-15.
    got[2] = 2**-10
    with pytest.raises(AssertionError, match="first at \\(2,\\)"):
        assert_one_rounding_step(got, want, "dv", terms=4096)
    got[2] = 2**-15
    got[3] = -1e-6  # across zero, within the floor's step
    assert assert_one_rounding_step(got, want, "dv", terms=4096) == 4
    got[2] = 2**-14  # two of the floor's steps
    with pytest.raises(AssertionError, match="first at \\(2,\\)"):
        assert_one_rounding_step(got, want, "dv", terms=4096)
    assert assert_one_rounding_step(got, want, "dv", terms=4 * 4096) == 4  # more terms, a floor twice as high


def test_nan_fails_the_one_step_comparison():
    want = rows(D=8).to(torch.float16)
    got = want.clone()
    got[0, 0, 0] = float("nan")
    with pytest.raises(AssertionError, match="first at \\(0, 0, 0\\)"):
        assert_one_rounding_step(got, want, "dk", terms=64)
    with pytest.raises(AssertionError, match="first at \\(0, 0, 0\\)"):
        assert_one_rounding_step(got, got, "dk", terms=64)  # the same NaN bits on both sides
