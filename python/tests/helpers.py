"""Test inputs shared by the test files (imported as a plain module: pytest
puts this folder on sys.path). torch is imported inside the functions that
use it: conftest imports this module, and the tests that need no torch (the
ABI, CLI and loader tests) must run where torch is not installed."""

import pytest

# What poisoned int32 outputs (the block selection) hold before libfsa writes them: no block number and
# not -1 (tests/conftest.py: poisoned_outputs).
POISON_INT32 = -0x21524111  # 0xDEADBEEF


def cu_seqlens_of(seqlens):
    cu = [0]
    for n in seqlens:
        cu.append(cu[-1] + n)
    return cu


def random_selection(cu, Hkv, K, BK, gen, duplicates=False):
    """int32 [Hkv, T, K] on the CPU: distinct blocks of -1 .. own block + 2 in random
    order (so -1 in the middle, future blocks and blocks past the sequence's end
    all occur), a -1 tail when the row is short; with duplicates, some rows
    repeat a block (the reference counts it once; kernels need not accept it)."""
    import torch

    T = cu[-1]
    topk = torch.full((Hkv, T, K), -1, dtype=torch.int32)
    for b in range(len(cu) - 1):
        for t in range(cu[b], cu[b + 1]):
            c = (t - cu[b]) // BK
            for h in range(Hkv):
                row = torch.randperm(c + 4, generator=gen)[:K] - 1
                if duplicates and K >= 2 and torch.rand(1, generator=gen).item() < 0.3:
                    row[-1] = row[0]
                topk[h, t, : len(row)] = row
    return topk


def rel_err(a, b):
    """||a - b|| / ||b|| in float64 (a and b are torch tensors)."""
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def check_rows(o, want, tol, what="o"):
    """Each (token, head) row of o [T, H, Dv] is close to want's: its error's norm, relative to the larger
    of the row's norm and 0.1 x the rms row norm of want, below 3 x tol (tol: the whole tensor's relative
    tolerance). A whole-tensor norm hides a few wrong rows; this finds them (NaN rows included)."""
    a, b = o.detach().double(), want.detach().double()
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)}, the reference's {tuple(b.shape)}"
    if b.numel() == 0:
        return
    row_norm = b.norm(dim=-1)
    floor = 0.1 * row_norm.square().mean().sqrt()
    rel = (a - b).norm(dim=-1) / row_norm.clamp_min(floor).clamp_min(1e-30)
    bad = ~(rel < 3 * tol)  # NaN is bad
    if bad.any():
        token, head = (int(i) for i in bad.nonzero()[0])
        worst = rel.nan_to_num(float("inf")).max().item()
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.numel()} (token, head) rows have a relative error "
                             f"of {3 * tol:.3g} or more, first at token {token}, head {head} "
                             f"({rel[token, head].item():.3g}); the worst {worst:.3g}")


def load_library_or_skip(backward=False):
    """The loaded libfsa; the test skips when there is none, or (backward) when it has no backward entry points."""
    from fsa_jit import _lib

    try:
        lib = _lib.get()
    except _lib.FsaLibraryNotFound as e:
        pytest.skip(f"libfsa not available: {str(e).splitlines()[0]}")
    if backward and not lib.has_backward:
        pytest.skip(f"{lib.path} has no backward entry points")
    return lib
