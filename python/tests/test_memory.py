"""Device memory of one forward plus backward through the binding, as torch's allocator counts it:
max_memory_allocated() beyond what was allocated before the call (outputs and gradients included)
stays within the default cap's budget (outputs, gradients and workspace), or the outputs, the
gradients and one workspace of at most an explicit cap; capped calls give the results of uncapped
ones."""

import pytest

from helpers import cuda_torch_or_skip

torch = cuda_torch_or_skip()  # skips without CUDA (fails under FSA_TEST_REQUIRE_GPU)

import fsa_jit  # noqa: E402
from fsa_jit import _lib  # noqa: E402
from fsa_jit.cli import _selection  # noqa: E402  (the benchmark protocol's selection, on the GPU)
from helpers import assert_one_rounding_step, check_rows  # noqa: E402
from helpers import load_library_or_skip  # noqa: E402

# The allocator rounds each block up to 512 bytes; a few small tensors besides.
SLACK = 4 << 20


@pytest.fixture(scope="module", autouse=True)
def library():
    return load_library_or_skip(backward=True)


def standard_inputs(T, G, dtype, D=128, hq=32, BK=64, K=16, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    hkv = hq // G
    q, k, v = (torch.randn(T, h, D, generator=gen, device="cuda").to(dtype).requires_grad_() for h in (hq, hkv, hkv))
    topk = _selection(T, hkv, K, BK, gen, torch)
    cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
    do = torch.randn(T, hq, D, generator=gen, device="cuda").to(dtype)
    return (q, k, v, topk, cu), do


def forward_backward(inputs, do, BK=64, **kw):
    """(peak bytes beyond the start, o, grads) of one forward plus backward."""
    q, k, v, _, _ = inputs
    for x in (q, k, v):
        x.grad = None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    o = fsa_jit.selected_attention(*inputs, BK, max_seqlen=q.shape[0], **kw)
    o.backward(do)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    return peak, o.detach(), (q.grad, k.grad, v.grad)


def sampled_rows(inputs, do, o, dq, BK=64, count=48, seed=0):
    """o and dq of `count` tokens (the first, the last, both sides of block boundaries, the rest random), all
    query heads, against float64 computed from their own selected keys only (a gather per token, so the
    64K-token problem needs no dense reference). The memory tests' only look at the values otherwise was
    isfinite: chunked or not, a result of the right shape and no NaN passed."""
    q, k, v, topk, _ = inputs
    T, hq, D = q.shape
    hkv = k.shape[1]
    G, scale = hq // hkv, D ** -0.5
    gen = torch.Generator().manual_seed(seed)
    fixed = {0, T - 1, BK - 1, BK, T // 2, T // 2 - 1}
    picks = sorted(fixed | set(torch.randint(0, T, (count - len(fixed),), generator=gen).tolist()))
    got_o, want_o, got_dq, want_dq = [], [], [], []
    for t in picks:
        for h in range(hkv):
            blocks = sorted({int(c) for c in topk[h, t].tolist() if 0 <= c <= t // BK})
            js = torch.cat([torch.arange(c * BK, min(c * BK + BK, t + 1)) for c in blocks]).to(q.device)
            qs = q[t, h * G:(h + 1) * G].detach().double()  # [G, D]
            ks, vs = k[js, h].detach().double(), v[js, h].detach().double()
            p = torch.softmax(scale * qs @ ks.T, dim=-1)  # [G, keys]
            o_t = p @ vs
            dp = do[t, h * G:(h + 1) * G].double() @ vs.T  # [G, keys]
            delta = (do[t, h * G:(h + 1) * G].double() * o_t).sum(-1, keepdim=True)
            want_o.append(o_t)
            want_dq.append(scale * (p * (dp - delta)) @ ks)
            got_o.append(o[t, h * G:(h + 1) * G])
            got_dq.append(dq[t, h * G:(h + 1) * G])
    tol = 1e-2 if q.dtype == torch.bfloat16 else 3e-3  # test_gpu.py's (o, gradients) tolerances
    where = f"the sampled tokens {picks[:4]}... (rows below count in that list)"
    check_rows(torch.stack(got_o), torch.stack(want_o), tol, what=f"o of {where}")
    check_rows(torch.stack(got_dq), torch.stack(want_dq), 2 * tol, what=f"dq of {where}", floor=1.0)


def outputs_and_grads_bytes(inputs):
    """o, lse, dq, dk and dv."""
    q, k, v, _, _ = inputs
    T, hq, _ = q.shape
    return 2 * q.nbytes + k.nbytes + v.nbytes + 4 * T * hq


@pytest.mark.parametrize("G,dtype", [(1, torch.bfloat16), (2, torch.bfloat16), (4, torch.bfloat16),
                                     (8, torch.bfloat16), (16, torch.bfloat16), (1, torch.float16)],
                         ids=["g1", "g2", "g4", "g8", "g16", "g1_f16"])
def test_a_default_call_at_64k_tokens_stays_within_3_gb(G, dtype, poisoned_outputs):
    # G = 1 is the tightest: its outputs and gradients take 2.16 GB, the backward's chunks of two KV heads 0.82 GB.
    inputs, do = standard_inputs(65536, G, dtype)
    peak, o, grads = forward_backward(inputs, do)
    own = outputs_and_grads_bytes(inputs)
    print(f"T 65536 G {G} {dtype}: {peak / 1e9:.3f} GB beyond the inputs ({own / 1e9:.3f} GB outputs and gradients)")
    assert peak <= _lib.FSA_WORKSPACE_DEFAULT_BUDGET + SLACK  # the default cap's budget
    assert peak <= 3e9
    assert torch.isfinite(o).all() and all(torch.isfinite(g).all() for g in grads)
    sampled_rows(inputs, do, o, grads[0])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_a_small_cap_bounds_the_memory_and_keeps_the_results(dtype, poisoned_outputs):
    # 16 KV heads of 4096 tokens: uncapped, the backward's workspace is about 230 MB; under 24 MiB it
    # runs one KV head at a time, in token chunks.
    inputs, do = standard_inputs(4096, 2, dtype, D=64, seed=1)
    own = outputs_and_grads_bytes(inputs)
    cap = 24 << 20
    free_peak, o_free, g_free = forward_backward(inputs, do, workspace_limit="unlimited")
    sampled_rows(inputs, do, o_free, g_free[0])  # capped and uncapped agree below; and both are right
    capped_peak, o_capped, g_capped = forward_backward(inputs, do, workspace_limit=cap)
    print(f"{dtype}: uncapped {free_peak / 1e6:.1f} MB, capped {capped_peak / 1e6:.1f} MB beyond the inputs")
    assert free_peak > own + 4 * cap, "uncapped, the problem needs far more than the cap"
    assert capped_peak <= own + cap + SLACK
    assert torch.equal(o_capped, o_free)  # the forward's chunks do not change a bit
    assert torch.equal(g_capped[0], g_free[0])  # nor dq's
    for name, a, b in zip(("dk", "dv"), g_capped[1:], g_free[1:]):  # token chunks split dK/dV's fp32 sums
        moved = assert_one_rounding_step(a, b, name, terms=4096 * 2)  # a key's sum: every token's 2 heads
        print(f"{dtype} {name}: {moved} of {b.numel()} elements one step apart")


@pytest.mark.parametrize("cap", [20_000_000, 16_000_000], ids=["one_index_for_all_heads", "two_indexes"])
def test_head_chunks_sharing_an_index_give_the_bits_of_an_uncapped_call(cap, poisoned_outputs):
    # G = 1, 32 KV heads of 2048 tokens, chunks of one head: under 20 MB one index inversion covers all
    # 32 heads, under 16 MB one per 16 heads. Head chunks change no bit, forward or backward.
    inputs, do = standard_inputs(2048, 1, torch.bfloat16, seed=2)
    _, o_free, g_free = forward_backward(inputs, do, workspace_limit="unlimited")
    peak, o_capped, g_capped = forward_backward(inputs, do, workspace_limit=cap)
    assert peak <= outputs_and_grads_bytes(inputs) + cap + SLACK
    assert torch.equal(o_capped, o_free)
    for a, b in zip(g_capped, g_free):
        assert torch.equal(a, b)
