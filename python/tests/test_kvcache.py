"""kvcache_attention on the GPU against its float64 PyTorch reference: page
sizes, NHD and HND caches, shared and per-head selections, top-k lengths,
speculative and prefill query lengths, graph replay with the page table
and selection changed in place, and a torch.compile call."""

import pytest

from helpers import cuda_torch_or_skip, load_library_or_skip

torch = cuda_torch_or_skip()  # skips without CUDA (fails under FSA_TEST_REQUIRE_GPU)

from fsa_jit import _lib  # noqa: E402
from fsa_jit.kvcache import kvcache_attention, kvcache_attention_reference  # noqa: E402
from helpers import check_rows  # noqa: E402

TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 4e-3}


@pytest.fixture(scope="module", autouse=True)
def library():
    return load_library_or_skip()


def make_problem(seqs, hq, hkv, d, page, bk, k, dtype, hnd=False, shared=False, with_length=False, seed=0, dv=None):
    """seqs: (q_len, cached) per sequence; pages shuffled, garbage past each sequence's pages."""
    gen = torch.Generator().manual_seed(seed)
    dev = "cuda"
    q_lens = [n for n, _ in seqs]
    used = [n + c for n, c in seqs]
    pages_of = [(L + page - 1) // page for L in used]
    num_pages = sum(pages_of) + 2
    max_pages = max(max(pages_of), 1)
    perm = torch.randperm(num_pages, generator=gen)
    table = torch.randint(-5, 2 * num_pages, (len(seqs), max_pages + 2), generator=gen, dtype=torch.int32)
    at = 0
    for b, n in enumerate(pages_of):
        table[b, :n] = perm[at:at + n].to(torch.int32)
        at += n
    dv = dv or d
    shape = (num_pages, hkv, page, d) if hnd else (num_pages, page, hkv, d)
    v_shape = (num_pages, hkv, page, dv) if hnd else (num_pages, page, hkv, dv)
    k_cache = torch.randn(shape, generator=gen).to(dtype).to(dev)
    v_cache = torch.randn(v_shape, generator=gen).to(dtype).to(dev)
    if hnd:
        k_cache, v_cache = k_cache.transpose(1, 2), v_cache.transpose(1, 2)
    tq = sum(q_lens)
    q = torch.randn((tq, hq, d), generator=gen).to(dtype).to(dev)
    cu = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32, device=dev)
    heads = 1 if shared else hkv
    topk = torch.full((tq, heads, k), -1, dtype=torch.int32)
    t = 0
    for (n, c) in seqs:
        for i in range(n):
            own = (c + i) // bk
            for h in range(heads):
                cand = torch.randperm(own + 1, generator=gen)[:k]
                topk[t, h, : len(cand)] = cand.to(torch.int32)
                topk[t, h, 0] = own
            t += 1
    topk = topk[:, 0].contiguous().to(dev) if shared else topk.to(dev)
    length = torch.randint(0, k + 1, (tq,), generator=gen, dtype=torch.int32).to(dev) if with_length else None
    return dict(q=q, k_cache=k_cache, v_cache=v_cache, cu_seqlens_q=cu,
                seqused_k=torch.tensor(used, dtype=torch.int32, device=dev), block_table=table.to(dev),
                topk_idx=topk, block_size=bk, topk_length=length)


def check(p, o, lse):
    o_ref, lse_ref = kvcache_attention_reference(**p)
    err = ((o.double() - o_ref).norm() / o_ref.norm().clamp_min(1e-30)).item()
    assert err < TOLERANCE[p["q"].dtype], err
    check_rows(o, o_ref, TOLERANCE[p["q"].dtype])
    empty = torch.isinf(lse_ref)
    assert torch.equal(torch.isinf(lse) & (lse < 0), empty)
    if (~empty).any():
        assert (lse.double()[~empty] - lse_ref[~empty]).abs().max().item() < 2e-3
    assert torch.all(o.transpose(0, 1)[empty] == 0)


SEQS = [(1, 0), (1, 1), (2, 63), (8, 64), (5, 65), (0, 9), (3, 2000)]


@pytest.mark.parametrize("page", [1, 16, 64, 256])
def test_decode_and_speculative_tokens_match_the_reference(page, poisoned_outputs):
    p = make_problem(SEQS, hq=8, hkv=2, d=64, page=page, bk=64, k=6, dtype=torch.bfloat16, seed=page)
    o, lse = kvcache_attention(**p, return_lse=True)
    check(p, o, lse)


def test_hnd_pages_shared_selection_and_lengths_match_the_reference(poisoned_outputs):
    p = make_problem(SEQS + [(40, 100)], hq=32, hkv=2, d=128, page=16, bk=32, k=8, dtype=torch.float16,
                     hnd=True, shared=True, with_length=True, seed=3)
    o, lse = kvcache_attention(**p, return_lse=True)
    check(p, o, lse)


@pytest.mark.parametrize("dims", [(192, 128), (64, 128), (128, 64)])
def test_a_value_cache_of_its_own_head_dim_matches_the_reference(dims, poisoned_outputs):
    p = make_problem(SEQS + [(60, 200)], hq=8, hkv=2, d=dims[0], page=16, bk=64, k=6, dtype=torch.bfloat16,
                     seed=11, dv=dims[1])
    o, lse = kvcache_attention(**p, return_lse=True)
    assert o.shape == (p["q"].shape[0], 8, dims[1])
    check(p, o, lse)


def test_strided_queries_and_top_k_rows_are_read_in_place(poisoned_outputs):
    # q as a view of wider rows (token and head strides past its own size), the top-k rows of a wider
    # tensor: the same values as their contiguous copies, and the same answer.
    p = make_problem(SEQS, hq=12, hkv=2, d=64, page=16, bk=32, k=5, dtype=torch.bfloat16, seed=17)
    tq = p["q"].shape[0]
    wide_q = torch.zeros((tq, 12, 2 * 64), dtype=p["q"].dtype, device=p["q"].device)
    wide_q[..., :64] = p["q"]
    # The padding past each row's 5 slots holds block 0, valid for every token (0x7fff, a block no token
    # reaches, was ignored by the semantics: a kernel reading 9 slots per row passed).
    wide_topk = torch.zeros((tq, 2, 9), dtype=torch.int32, device=p["q"].device)
    wide_topk[..., :5] = p["topk_idx"]
    strided = dict(p, q=wide_q[..., :64], topk_idx=wide_topk[..., :5])
    assert strided["q"].stride() == (12 * 128, 128, 1) and strided["topk_idx"].stride() == (18, 9, 1)
    o, lse = kvcache_attention(**strided, return_lse=True)
    check(p, o, lse)
    o2, lse2 = kvcache_attention(**p, return_lse=True)
    assert torch.equal(o, o2) and torch.equal(lse, lse2)


@pytest.mark.parametrize("splits", [0, 1, 4], ids=["rule", "one_share", "four_shares"])
def test_a_scale_the_hkt_layout_and_forced_splits_match_the_reference(splits, poisoned_outputs):
    """Every other test here runs the default scale, the "thk" (or shared) selection and the plan's split rule:
    the binding's scale, the "hkt" strides (token stride = stride(1), head stride = stride(0)) and a forced split
    count (one share: no merge; four: the merge of a decode token's partials) against the reference."""
    p = make_problem(SEQS + [(4, 700)], hq=8, hkv=2, d=64, page=16, bk=32, k=8, dtype=torch.bfloat16, seed=31,
                     with_length=True)
    hkt = dict(p, topk_idx=p["topk_idx"].transpose(0, 1).contiguous(), topk_layout="hkt", scale=0.21)
    o, lse = kvcache_attention(**hkt, return_lse=True, splits=splits)
    check(hkt, o, lse)
    # The scale is used: the default's result is far from it (0.21 against 1/8).
    o_default = kvcache_attention(**dict(hkt, scale=None), splits=splits)
    assert ((o_default.double() - o.double()).norm() / o.double().norm()).item() > 10 * TOLERANCE[torch.bfloat16]


def replay_and_check(graph, p, o, lse):
    graph.replay()
    torch.cuda.synchronize()
    check(p, o, lse)


def captured(p):
    """(graph, o, lse): one call of `p` captured (its plan made by an eager call first), replayed and checked."""
    kvcache_attention(**p, return_lse=True)  # creates the plan outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o, lse = kvcache_attention(**p, return_lse=True)
    replay_and_check(graph, p, o, lse)
    return graph, o, lse


def test_a_graph_replays_with_the_page_table_and_selection_updated_in_place(poisoned_outputs):
    """o and lse of each replay against the reference of the inputs then in the buffers (the outputs are
    poisoned inside the graph too: each replay fills them before the kernels run)."""
    p = make_problem(SEQS, hq=4, hkv=4, d=64, page=16, bk=16, k=8, dtype=torch.bfloat16, seed=5)
    graph, o, lse = captured(p)
    first_o, first_lse = o.clone(), lse.clone()
    q2 = make_problem(SEQS, hq=4, hkv=4, d=64, page=16, bk=16, k=8, dtype=torch.bfloat16, seed=6)
    for name in ("block_table", "topk_idx", "k_cache", "v_cache", "q"):
        p[name].copy_(q2[name])
    replay_and_check(graph, p, o, lse)
    assert not torch.equal(o, first_o) and not torch.equal(lse, first_lse), "the replay must read the new inputs"


def test_a_graph_replays_after_the_lengths_and_the_query_split_changed_in_place(poisoned_outputs):
    """What changes at every decode step, changed in place between replays: cached lengths (seqused_k), how
    the query tokens split over the sequences (cu_seqlens_q: one sequence loses its token, another gains
    one), the top-k lengths, the pages (fewer: the rest of the cache and the table's last column are
    left as garbage the new lengths never reach), the selection and q."""
    kw = dict(hq=8, hkv=2, d=64, page=16, bk=16, k=8, dtype=torch.bfloat16, with_length=True)
    p = make_problem([(1, 0), (1, 1), (2, 63), (8, 64), (5, 65), (0, 9), (3, 2000)], seed=12, **kw)
    graph, o, lse = captured(p)
    first_o = o.clone()
    b = make_problem([(2, 0), (0, 1), (1, 63), (8, 60), (5, 66), (1, 9), (3, 1990)], seed=13, **kw)
    for name in ("q", "cu_seqlens_q", "seqused_k", "topk_idx", "topk_length"):
        assert p[name].shape == b[name].shape, name
        p[name].copy_(b[name])
    for name in ("k_cache", "v_cache"):
        assert b[name].shape[0] < p[name].shape[0]
        p[name][: b[name].shape[0]].copy_(b[name])
    assert b["block_table"].shape[1] < p["block_table"].shape[1]
    p["block_table"][:, : b["block_table"].shape[1]].copy_(b["block_table"])
    replay_and_check(graph, p, o, lse)
    assert not torch.equal(o, first_o), "the replay must read the new metadata"


@pytest.mark.skipif(not hasattr(torch.library, "custom_op"), reason="the operator needs torch 2.4")
def test_a_compiled_call_gives_the_bits_of_an_eager_one():
    p = make_problem(SEQS, hq=8, hkv=2, d=64, page=16, bk=16, k=8, dtype=torch.bfloat16, seed=7, with_length=True)
    o_eager, lse_eager = kvcache_attention(**p, return_lse=True)
    torch._dynamo.reset()
    compiled = torch.compile(lambda **kw: kvcache_attention(**kw, return_lse=True), fullgraph=True)
    o, lse = compiled(**p)
    torch.cuda.synchronize()
    assert torch.equal(o, o_eager) and torch.equal(lse, lse_eager)
    check(p, o, lse)


def test_the_plan_reports_its_split_count_and_why():
    from fsa_jit.kvcache import kvcache_plan_choice

    c = kvcache_plan_choice(dtype=torch.bfloat16, head_dim=64, num_q_heads=8, num_kv_heads=2, block_size=64,
                            top_k=16, page_size=64, max_batch=8, max_query_tokens=32)
    assert c["candidates"] == 4  # 1, 2, 4 and 8 shares
    assert c["source"] in ("heuristic", "measured")
    assert c["splits"] in (1, 2, 4, 8) and c["variant"] == f"kvc.s{c['splits']}"
    forced = kvcache_plan_choice(dtype=torch.bfloat16, head_dim=64, num_q_heads=8, num_kv_heads=2, block_size=64,
                                 top_k=16, page_size=64, max_batch=8, max_query_tokens=32, splits=3)
    assert (forced["source"], forced["splits"], forced["candidates"], forced["will_measure"]) == ("forced", 3, 1, False)


def test_validate_refuses_a_page_number_past_the_cache_and_passes_good_metadata(poisoned_outputs):
    p = make_problem(SEQS, 8, 2, 64, 16, 64, 8, torch.bfloat16, seed=5)
    o_plain = kvcache_attention(**p)
    o_checked = kvcache_attention(**p, validate=True)
    assert torch.equal(o_plain, o_checked)
    bad = dict(p, block_table=p["block_table"].clone())
    bad["block_table"][6, 0] = 10**6  # sequence 6 caches 2003 keys: page slot 0 is used
    with pytest.raises(_lib.FsaError, match="block_table entries of used pages outside"):
        kvcache_attention(**bad, validate=True)
