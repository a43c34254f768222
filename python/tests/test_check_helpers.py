"""The GPU tests' own checks, on the CPU: the per-row comparison (helpers.check_rows) and the poisoned
outputs (conftest.py: poisoned_outputs) must catch what they are there to catch."""

import importlib

import pytest

torch = pytest.importorskip("torch")

from helpers import POISON_INT32, check_rows, rel_err  # noqa: E402


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


def test_the_poisoned_outputs_fixture_fills_what_the_bindings_modules_allocate(poisoned_outputs):
    compressed = importlib.import_module("fsa_jit.compressed")
    o = compressed.torch.empty((3, 2, 8), dtype=torch.bfloat16)
    topk = compressed.torch.empty((3, 1, 4), dtype=torch.int32)
    compressed.torch.empty(64, dtype=torch.uint8)  # a workspace, not an output: neither filled nor listed
    assert torch.isnan(o).all() and bool((topk == POISON_INT32).all())
    assert poisoned_outputs == [(torch.bfloat16, (3, 2, 8)), (torch.int32, (3, 1, 4))]
