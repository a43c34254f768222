"""The plain NSA layer the GPU tests compare against, checked on the CPU against
independent statements of its rules, and the mean-pooling compression."""

import math

import pytest

torch = pytest.importorskip("torch")

from fsa_jit.nsa import compress_mean, compressed_cu_seqlens  # noqa: E402
from plain_nsa import nsa_layer, select  # noqa: E402


def select_row_by_rule(scores, n, top_k, init_blocks, local_blocks):
    """One row, as the rule is written: forced blocks (c < init or c > own - local) first, ascending;
    then by score, descending, ties to the lower block; the first K of that order, ascending, -1 after."""
    forced = [c for c in range(n) if c < init_blocks or c > n - 1 - local_blocks]
    free = sorted((c for c in range(n) if c not in forced), key=lambda c: (-scores[c], c))
    taken = sorted((forced + free)[:top_k])
    return taken + [-1] * (top_k - len(taken))


@pytest.mark.parametrize("top_k,init_blocks,local_blocks", [(4, 1, 2), (3, 0, 0), (2, 2, 3), (6, 1, 1)])
def test_the_selection_follows_the_rule(top_k, init_blocks, local_blocks):
    gen = torch.Generator().manual_seed(top_k)
    block_size, length = 4, 37
    n_blocks = (length + block_size - 1) // block_size
    # Few distinct values, so that equal scores occur and the tie rule is exercised.
    scores = torch.randint(0, 4, (length, n_blocks), generator=gen).double() / 4
    got = select(scores, top_k, block_size, init_blocks, local_blocks)
    for i in range(length):
        n = i // block_size + 1
        want = select_row_by_rule(scores[i].tolist(), n, top_k, init_blocks, local_blocks)
        assert got[i].tolist() == want, f"row {i}"


def test_with_everything_visible_the_selected_and_window_branches_are_causal_attention():
    gen = torch.Generator().manual_seed(0)
    T, Hq, Hkv, D = 40, 4, 2, 8
    q = torch.randn(T, Hq, D, generator=gen, dtype=torch.float64)
    k = torch.randn(T, Hkv, D, generator=gen, dtype=torch.float64)
    v = torch.randn(T, Hkv, D, generator=gen, dtype=torch.float64)
    cu = torch.tensor([0, T], dtype=torch.int32)
    k_cmp, cu_c = compress_mean(k, cu, 8, 4)
    v_cmp, _ = compress_mean(v, cu, 8, 4)
    out = nsa_layer(q, k, v, k_cmp, v_cmp, 0.0, 1.0, 0.0, cu, cu_c, 8, 4, block_size=4, top_k=10, window=T)
    group = Hq // Hkv
    causal = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), k.repeat_interleave(group, 1).transpose(0, 1), v.repeat_interleave(group, 1).transpose(0, 1),
        is_causal=True).transpose(0, 1)
    torch.testing.assert_close(out["o_sel"], causal)
    torch.testing.assert_close(out["o_win"], causal)
    torch.testing.assert_close(out["o"], causal)


def test_the_compressed_branch_sees_only_finished_windows():
    gen = torch.Generator().manual_seed(1)
    T, H, D, l, d = 20, 1, 4, 6, 2
    q = torch.randn(T, H, D, generator=gen, dtype=torch.float64)
    k = torch.randn(T, H, D, generator=gen, dtype=torch.float64)
    v = torch.randn(T, H, D, generator=gen, dtype=torch.float64)
    cu = torch.tensor([0, T], dtype=torch.int32)
    k_cmp, cu_c = compress_mean(k, cu, l, d)
    v_cmp, _ = compress_mean(v, cu, l, d)
    out = nsa_layer(q, k, v, k_cmp, v_cmp, 1.0, 0.0, 0.0, cu, cu_c, l, d, block_size=4, top_k=2, window=1)
    for t in range(T):
        visible = [j for j in range(k_cmp.shape[0]) if j * d + l - 1 <= t]
        if not visible:
            assert torch.count_nonzero(out["o_cmp"][t]) == 0 and math.isinf(out["lse_cmp"][0, t].item())
            continue
        x = (q[t, 0] @ k_cmp[visible, 0].T) / math.sqrt(D)
        torch.testing.assert_close(out["o_cmp"][t, 0], torch.softmax(x, 0) @ v_cmp[visible, 0])
        torch.testing.assert_close(out["lse_cmp"][0, t], torch.logsumexp(x, 0))


def test_block_scores_sum_the_group_probabilities_of_overlapping_tokens():
    gen = torch.Generator().manual_seed(2)
    T, Hq, D, l, d, bk = 33, 3, 4, 8, 4, 8
    q = torch.randn(T, Hq, D, generator=gen, dtype=torch.float64)
    k = torch.randn(T, 1, D, generator=gen, dtype=torch.float64)
    cu = torch.tensor([0, T], dtype=torch.int32)
    k_cmp, cu_c = compress_mean(k, cu, l, d)
    out = nsa_layer(q, k, k, k_cmp, k_cmp, 1.0, 1.0, 1.0, cu, cu_c, l, d, block_size=bk, top_k=2, window=4)
    scores = out["scores"][(0, 0)]
    t = T - 1
    visible = [j for j in range(k_cmp.shape[0]) if j * d + l - 1 <= t]
    p = torch.softmax(torch.einsum("hd,jd->hj", q[t], k_cmp[visible, 0]) / math.sqrt(D), dim=1).sum(0)
    for c in range(t // bk + 1):
        want = sum(p[j].item() for j in visible if j * d <= c * bk + bk - 1 and j * d + l - 1 >= c * bk)
        assert scores[t, c].item() == pytest.approx(want, abs=1e-12)


def test_compress_mean_averages_each_window_of_each_sequence():
    x = torch.arange(26 * 2, dtype=torch.float32).reshape(26, 1, 2).requires_grad_()
    cu = torch.tensor([0, 3, 13, 26], dtype=torch.int32)  # the first is shorter than the kernel
    x_cmp, cu_c = compress_mean(x, cu, 4, 3)
    assert cu_c.tolist() == [0, 0, 3, 7] == compressed_cu_seqlens(cu, 4, 3).tolist()
    starts = [3, 6, 9, 13, 16, 19, 22]
    want = torch.stack([x[s:s + 4].mean(0) for s in starts])
    torch.testing.assert_close(x_cmp, want)
    x_cmp.sum().backward()
    assert x.grad[:3].abs().sum() == 0 and x.grad[3:7, 0, 0].tolist() == [0.25, 0.25, 0.25, 0.5]


def test_compress_mean_rejects_offsets_that_do_not_cover_x():
    with pytest.raises(ValueError, match="rise from 0 to T=5"):
        compress_mean(torch.zeros(5, 1, 2), torch.tensor([0, 4], dtype=torch.int32), 2, 1)
    with pytest.raises(ValueError, match="stride"):
        compress_mean(torch.zeros(5, 1, 2), torch.tensor([0, 5], dtype=torch.int32), 2, 3)


class _CountedOffsets(torch.Tensor):
    """cu_seqlens that count their host reads (tolist)."""

    reads = 0

    def tolist(self):
        type(self).reads += 1
        return super().tolist()


def test_the_layer_module_compresses_k_and_v_with_one_host_read_of_the_offsets():
    from fsa_jit.nsa import _compress_means

    gen = torch.Generator().manual_seed(3)
    k, v = torch.randn(70, 2, 16, generator=gen), torch.randn(70, 2, 8, generator=gen)
    cu = torch.tensor([0, 33, 33, 70], dtype=torch.int32).as_subclass(_CountedOffsets)
    _CountedOffsets.reads = 0
    (k_cmp, v_cmp), cu_c = _compress_means((k, v), cu, 8, 4)
    assert _CountedOffsets.reads == 1
    plain = torch.tensor([0, 33, 33, 70], dtype=torch.int32)
    for x, x_cmp in ((k, k_cmp), (v, v_cmp)):
        want, want_cu = compress_mean(x, plain, 8, 4)
        assert torch.equal(x_cmp, want) and torch.equal(cu_c, want_cu)
    with pytest.raises(ValueError, match=r"k has 70 tokens, v has 69 tokens: they must agree"):
        _compress_means((k, v[:69]), plain, 8, 4, ("k", "v"))
    with pytest.raises(ValueError, match=r"cu_seqlens must rise from 0 to T=69"):
        _compress_means((v[:69],), plain, 8, 4)
