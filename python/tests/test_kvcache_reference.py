"""The paged cache's float64 reference (fsa_jit.kvcache.kvcache_attention_reference), which test_kvcache.py
holds the GPU against, checked on the CPU against the selected attention's reference (itself checked against a
per-row loop in test_reference.py): the new tokens of a sequence are the last tokens of a packed varlen batch
whose keys are the cached ones, read through shuffled pages."""

import pytest

torch = pytest.importorskip("torch")

from fsa_jit.kvcache import kvcache_attention_reference  # noqa: E402
from fsa_jit.reference import selected_attention_reference  # noqa: E402


@pytest.mark.parametrize("layout", ["thk", "hkt", "shared"])
@pytest.mark.parametrize("hnd", [False, True], ids=["nhd", "hnd"])
def test_the_paged_reference_is_the_selected_reference_of_the_last_tokens(layout, hnd):
    gen = torch.Generator().manual_seed(7)
    seqs = [(1, 1), (3, 40), (5, 67), (0, 9), (2, 2)]  # (new tokens, cached keys with them)
    hq, hkv, d, dv, page, bk, k = 6, 2, 16, 8, 4, 8, 5
    lens = [n for _, n in seqs]
    cu_full = [0]
    for n in lens:
        cu_full.append(cu_full[-1] + n)
    T = cu_full[-1]
    keys = torch.randn(T, hkv, d, generator=gen, dtype=torch.float64)
    vals = torch.randn(T, hkv, dv, generator=gen, dtype=torch.float64)
    q_full = torch.randn(T, hq, d, generator=gen, dtype=torch.float64)
    # Pages: each sequence's keys in pages of its own, the pages shuffled over the cache.
    pages_of = [(n + page - 1) // page for n in lens]
    perm = torch.randperm(sum(pages_of) + 3, generator=gen)
    k_cache = torch.randn(len(perm), page, hkv, d, generator=gen, dtype=torch.float64)
    v_cache = torch.randn(len(perm), page, hkv, dv, generator=gen, dtype=torch.float64)
    table = torch.full((len(seqs), max(pages_of) + 1), -7, dtype=torch.int32)
    at = 0
    for b, n in enumerate(lens):
        for j in range(pages_of[b]):
            slot = int(perm[at + j])
            table[b, j] = slot
            rows = slice(j * page, min((j + 1) * page, n))
            k_cache[slot, : rows.stop - rows.start] = keys[cu_full[b] + rows.start:cu_full[b] + rows.stop]
            v_cache[slot, : rows.stop - rows.start] = vals[cu_full[b] + rows.start:cu_full[b] + rows.stop]
        at += pages_of[b]
    if hnd:  # [pages, Hkv, page, D] storage seen as [pages, page, Hkv, D]
        k_cache = k_cache.transpose(1, 2).contiguous().transpose(1, 2)
        v_cache = v_cache.transpose(1, 2).contiguous().transpose(1, 2)
    # The selection of every token of the full batch (junk included: -1, future blocks, a repeat); the new
    # tokens' rows are the paged call's.
    heads = 1 if layout == "shared" else hkv
    sel = torch.randint(-1, 12, (heads, T, k), generator=gen, dtype=torch.int32)
    sel[:, :, 1] = sel[:, :, 0]
    length = torch.randint(0, k + 1, (T,), generator=gen, dtype=torch.int32)
    cut = torch.arange(k)[None, None, :] >= length[None, :, None]
    full_sel = torch.where(cut, -1, sel).expand(hkv, T, k).contiguous()
    new = [t for b, (m, n) in enumerate(seqs) for t in range(cu_full[b] + n - m, cu_full[b] + n)]
    q = q_full[new]
    if layout == "thk":
        topk = sel[:, new].transpose(0, 1).contiguous()
    elif layout == "hkt":
        topk = sel[:, new].contiguous()
    else:
        topk = sel[0, new].contiguous()
    cu_q = torch.tensor([0] + torch.tensor([m for m, _ in seqs]).cumsum(0).tolist(), dtype=torch.int32)
    o, lse = kvcache_attention_reference(q, k_cache, v_cache, cu_q, torch.tensor(lens, dtype=torch.int32), table,
                                         topk, bk, topk_length=length[new], topk_layout="hkt" if layout == "hkt"
                                         else "thk", scale=0.3)
    want_o, want_lse = selected_attention_reference(q_full, keys, vals, full_sel, torch.tensor(cu_full, dtype=torch.int32),
                                                    bk, 0.3, return_lse=True, topk_layout="hkt")
    torch.testing.assert_close(o, want_o[new], rtol=1e-12, atol=1e-12)
    assert torch.equal(torch.isneginf(lse), torch.isneginf(want_lse[:, new]))
    finite = torch.isfinite(lse)
    assert finite.any() and (~finite).any()  # both kinds of rows occur
    torch.testing.assert_close(lse[finite], want_lse[:, new][finite], rtol=1e-12, atol=1e-12)
