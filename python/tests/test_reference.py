"""The pure-PyTorch reference against a per-row loop written from docs/semantics.md,
and its gradients against finite differences (CPU only)."""

import math

import pytest

torch = pytest.importorskip("torch")

from fsa_jit.reference import selected_attention_reference  # noqa: E402
from helpers import cu_seqlens_of, random_selection  # noqa: E402


def naive(q, k, v, topk, cu, BK, scale):
    """One (token, query head) at a time, straight from the rules."""
    T, Hq, D = q.shape
    Hkv = k.shape[1]
    G = Hq // Hkv
    o = torch.zeros(T, Hq, D, dtype=torch.float64)
    lse = torch.full((Hq, T), -math.inf, dtype=torch.float64)
    for b in range(len(cu) - 1):
        s, e = cu[b], cu[b + 1]
        for t in range(s, e):
            i = t - s
            for qh in range(Hq):
                h = qh // G
                blocks = []
                for idx in topk[h, t].tolist():
                    if 0 <= idx <= i // BK and idx not in blocks:  # first occurrence only
                        blocks.append(idx)
                keys = [s + j for c in blocks for j in range(c * BK, min((c + 1) * BK, e - s)) if j <= i]
                if not keys:
                    continue
                x = torch.stack([scale * torch.dot(q[t, qh].double(), k[j, h].double()) for j in keys])
                p = torch.softmax(x, 0)
                o[t, qh] = sum(p[m] * v[j, h].double() for m, j in enumerate(keys))
                lse[qh, t] = torch.logsumexp(x, 0)
    return o, lse


@pytest.mark.parametrize(
    "seqlens, Hq, Hkv, D, BK, K, layout, dup",
    [
        ([9], 2, 1, 8, 4, 3, "hkt", False),
        ([1, 7, 8, 9], 4, 2, 8, 4, 2, "thk", False),
        ([13, 1, 5], 3, 1, 4, 2, 4, "hkt", True),
        ([16, 17], 2, 2, 16, 8, 1, "thk", True),
    ],
)
def test_matches_naive(seqlens, Hq, Hkv, D, BK, K, layout, dup):
    gen = torch.Generator().manual_seed(sum(seqlens) * 31 + Hq)
    cu = cu_seqlens_of(seqlens)
    T = cu[-1]
    q = torch.randn(T, Hq, D, generator=gen, dtype=torch.float64)
    k = torch.randn(T, Hkv, D, generator=gen, dtype=torch.float64)
    v = torch.randn(T, Hkv, D, generator=gen, dtype=torch.float64)
    topk = random_selection(cu, Hkv, K, BK, gen, dup)
    scale = 0.7
    want_o, want_lse = naive(q, k, v, topk, cu, BK, scale)
    if layout == "thk":
        topk = topk.transpose(0, 1).contiguous()
    o, lse = selected_attention_reference(q, k, v, topk, torch.tensor(cu, dtype=torch.int32), BK, scale,
                                          return_lse=True, topk_layout=layout)
    assert o.dtype == torch.float64 and o.shape == (T, Hq, D) and lse.shape == (Hq, T)
    torch.testing.assert_close(o, want_o, rtol=1e-12, atol=1e-12)
    assert torch.equal(torch.isneginf(lse), torch.isneginf(want_lse))
    finite = torch.isfinite(want_lse)
    torch.testing.assert_close(lse[finite], want_lse[finite], rtol=1e-12, atol=1e-12)


def test_rows_without_keys_give_zero_and_no_nan_gradient():
    T, Hq, Hkv, D, BK = 6, 2, 1, 4, 2
    q = torch.randn(T, Hq, D, dtype=torch.float64, requires_grad=True)
    k = torch.randn(T, Hkv, D, dtype=torch.float64, requires_grad=True)
    v = torch.randn(T, Hkv, D, dtype=torch.float64, requires_grad=True)
    topk = torch.full((Hkv, T, 2), -1, dtype=torch.int32)
    topk[0, 3, 0] = 1  # token 3 sees keys 2 and 3; token 5 asks for a future block
    topk[0, 5, 0] = 3
    o, lse = selected_attention_reference(q, k, v, topk, torch.tensor([0, T], dtype=torch.int32), BK,
                                          return_lse=True)
    assert torch.count_nonzero(o[[0, 1, 2, 4, 5]]) == 0
    assert torch.isneginf(lse[:, [0, 1, 2, 4, 5]]).all() and torch.isfinite(lse[:, 3]).all()
    o.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert torch.count_nonzero(q.grad[[0, 1, 2, 4, 5]]) == 0
    assert torch.count_nonzero(k.grad[[0, 1, 4, 5]]) == 0


def test_low_precision_inputs_keep_dtype():
    q = torch.randn(5, 2, 16).to(torch.bfloat16)
    k = torch.randn(5, 1, 16).to(torch.bfloat16)
    topk = torch.zeros(1, 5, 1, dtype=torch.int32)
    o, lse = selected_attention_reference(q, k, k, topk, torch.tensor([0, 5], dtype=torch.int32), 16,
                                          return_lse=True)
    assert o.dtype == torch.bfloat16 and lse.dtype == torch.float32


def test_gradcheck():
    gen = torch.Generator().manual_seed(7)
    cu = [0, 3, 8]
    T, Hq, Hkv, D, BK, K = 8, 4, 2, 3, 2, 2
    q = torch.randn(T, Hq, D, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(T, Hkv, D, generator=gen, dtype=torch.float64, requires_grad=True)
    v = torch.randn(T, Hkv, D, generator=gen, dtype=torch.float64, requires_grad=True)
    topk = random_selection(cu, Hkv, K, BK, gen)
    cu_t = torch.tensor(cu, dtype=torch.int32)

    def f(q, k, v):
        return selected_attention_reference(q, k, v, topk, cu_t, BK, scale=0.9)

    assert torch.autograd.gradcheck(f, (q, k, v), eps=1e-6, atol=1e-7, rtol=1e-5)
