"""selected_attention on the GPU against the float64 reference, autograd,
determinism, CUDA graphs, streams and devices. Small shapes; the first run
compiles each plan's kernels (later runs find them in the disk cache)."""

import pytest

from helpers import cuda_torch_or_skip, load_library_or_skip, skip_or_fail

torch = cuda_torch_or_skip()  # skips without CUDA (fails under FSA_TEST_REQUIRE_GPU)

import fsa_jit  # noqa: E402
from fsa_jit import _lib, attention  # noqa: E402
from fsa_jit.reference import selected_attention_reference  # noqa: E402
from helpers import (assert_one_rounding_step, check_grads, check_rows, cu_seqlens_of, random_selection,  # noqa: E402
                     rel_err)

# relative-norm tolerances: (o, gradients)
TOLERANCE = {torch.bfloat16: (1e-2, 2e-2), torch.float16: (3e-3, 6e-3)}
LSE_ATOL = 2e-3


@pytest.fixture(scope="module", autouse=True)
def library():
    return load_library_or_skip()


@pytest.fixture
def backward(library):
    if not library.has_backward:
        skip_or_fail(f"{library.path} has no backward entry points")


def case(dtype, D, Hkv, G, BK, K, seqlens, layout="hkt", q_view="contiguous", algorithm="auto", scale=None,
         Dv=None):
    return dict(dtype=dtype, D=D, Hkv=Hkv, G=G, BK=BK, K=K, seqlens=seqlens, layout=layout, q_view=q_view,
                algorithm=algorithm, scale=scale, Dv=Dv or D)


bf16, f16 = torch.bfloat16, torch.float16
CASES = [
    case(bf16, 128, 2, 1, 64, 4, [63, 64, 65, 1], "hkt"),
    case(f16, 64, 1, 2, 32, 8, [100, 1, 130], "thk", q_view="transposed"),
    case(bf16, 32, 2, 3, 16, 6, [65, 129], "hkt", q_view="sliced"),
    case(f16, 96, 1, 4, 64, 3, [257], "thk", scale=0.05),
    case(bf16, 192, 1, 8, 128, 2, [300, 45], "hkt", q_view="misaligned"),
    case(bf16, 256, 1, 16, 32, 5, [64, 150], "thk"),
    case(f16, 128, 2, 8, 16, 16, [1, 63, 64, 65, 128], "hkt"),
    case(bf16, 64, 4, 2, 128, 3, [200, 1, 70], "thk", algorithm="fsa"),
    case(bf16, 64, 4, 2, 128, 3, [200, 1, 70], "thk", algorithm="nsa"),
    case(f16, 128, 1, 16, 64, 4, [190, 66], "hkt", algorithm="fsa"),
    case(f16, 128, 1, 16, 64, 4, [190, 66], "hkt", algorithm="nsa"),
    # Dk != Dv: v and o of their own head dim (NSA's 192 / 128 among them).
    case(bf16, 192, 2, 4, 64, 4, [130, 1, 64], "hkt", algorithm="fsa", Dv=128),
    case(bf16, 192, 2, 4, 64, 4, [130, 1, 64], "thk", algorithm="nsa", Dv=128),
    case(f16, 64, 1, 8, 32, 6, [200, 17], "hkt", q_view="sliced", Dv=128),
    case(bf16, 128, 2, 2, 16, 8, [90, 33], "thk", Dv=64),
]


def case_id(c):
    return (f"{str(c['dtype'])[6:]}-d{c['D']}-dv{c['Dv']}-hkv{c['Hkv']}-g{c['G']}-bk{c['BK']}-k{c['K']}-{c['layout']}"
            f"-{c['q_view']}-{c['algorithm']}")


def view_of(x, how):
    """x's values in a tensor with the given memory layout."""
    if how == "contiguous":
        return x.contiguous()
    if how == "transposed":  # [H, T, D] storage: token stride D, head stride T*D
        return x.transpose(0, 1).contiguous().transpose(0, 1)
    if how == "sliced":  # the front half of a wider buffer: head stride 2*D
        wide = torch.zeros(x.shape[0], x.shape[1], 2 * x.shape[2], dtype=x.dtype, device=x.device)
        wide[..., : x.shape[2]] = x
        return wide[..., : x.shape[2]]
    if how == "misaligned":  # 8 bytes past a 16-byte boundary: libfsa cannot read it in place
        flat = torch.zeros(x.numel() + 4, dtype=x.dtype, device=x.device)
        y = flat[4:].view(x.shape)
        y.copy_(x)
        return y
    raise ValueError(how)


def make(c, seed=0, requires_grad=True, device="cuda"):
    gen = torch.Generator().manual_seed(seed)
    cu = cu_seqlens_of(c["seqlens"])
    T, Hkv, D = cu[-1], c["Hkv"], c["D"]
    Hq = Hkv * c["G"]
    q = torch.randn(T, Hq, D, generator=gen).to(device=device, dtype=c["dtype"])
    k = torch.randn(T, Hkv, D, generator=gen).to(device=device, dtype=c["dtype"])
    v = torch.randn(T, Hkv, c["Dv"], generator=gen).to(device=device, dtype=c["dtype"])
    topk = random_selection(cu, Hkv, c["K"], c["BK"], gen)
    if c["layout"] == "thk":
        topk = topk.transpose(0, 1).contiguous()
    q = view_of(q, c["q_view"]).requires_grad_(requires_grad)
    k.requires_grad_(requires_grad)
    v.requires_grad_(requires_grad)
    do = torch.randn(T, Hq, c["Dv"], generator=gen).to(device=device, dtype=c["dtype"])
    # The layout is found from the shape unless Hkv == T makes it ambiguous.
    layout = c["layout"] if Hkv == T else None
    return dict(q=q, k=k, v=v, topk_idx=topk.to(device), cu_seqlens=torch.tensor(cu, dtype=torch.int32, device=device),
                block_size=c["BK"], scale=c["scale"], algorithm=c["algorithm"], topk_layout=layout,
                max_seqlen=max(c["seqlens"])), do


def reference(inputs, do=None):
    """o, lse and, with do, (dq, dk, dv), in float64 from the same rounded inputs. The selection's layout is
    read off its shape here (as the caller's case made it), not by the binding's _topk_layout, which the
    reference would otherwise share with the code under test."""
    q, k, v = (inputs[n].detach().double().requires_grad_() for n in ("q", "k", "v"))
    topk = inputs["topk_idx"]
    layout = inputs["topk_layout"] or ("hkt" if tuple(topk.shape[:2]) == (k.shape[1], q.shape[0]) else "thk")
    o, lse = selected_attention_reference(q, k, v, topk, inputs["cu_seqlens"], inputs["block_size"],
                                          inputs["scale"], return_lse=True, topk_layout=layout)
    grads = torch.autograd.grad(o, (q, k, v), do.double()) if do is not None else None
    return o.detach(), lse.detach(), grads


def check_lse(lse, want):
    assert torch.equal(torch.isneginf(lse), torch.isneginf(want)), "rows without keys must give lse = -inf"
    finite = torch.isfinite(want)
    assert torch.isfinite(lse[finite]).all()
    if finite.any():
        assert (lse[finite].double() - want[finite]).abs().max().item() < LSE_ATOL


@pytest.mark.parametrize("c", CASES, ids=case_id)
def test_forward(library, c, poisoned_outputs):
    inputs, _ = make(c, requires_grad=library.has_backward)  # the plan the backward test will use
    o, lse = fsa_jit.selected_attention(**inputs, return_lse=True)
    assert o.shape == inputs["q"].shape[:2] + (c["Dv"],) and o.dtype == c["dtype"] and o.is_contiguous()
    assert lse.shape == (o.shape[1], o.shape[0]) and lse.dtype == torch.float32
    want_o, want_lse, _ = reference(inputs)
    err = rel_err(o, want_o)
    assert err < TOLERANCE[c["dtype"]][0], f"o: relative error {err:.3g}"
    check_rows(o, want_o, TOLERANCE[c["dtype"]][0])
    check_lse(lse, want_lse)
    no_keys = torch.isneginf(want_lse).t()  # [T, Hq]
    assert torch.count_nonzero(o[no_keys]) == 0


@pytest.mark.parametrize("c", CASES, ids=case_id)
def test_backward(backward, c, poisoned_outputs):
    inputs, do = make(c, seed=1)
    o = fsa_jit.selected_attention(**inputs)
    grads = torch.autograd.grad(o, (inputs["q"], inputs["k"], inputs["v"]), do)
    _, _, want = reference(inputs, do)
    tol = TOLERANCE[c["dtype"]][1]
    for g, x in zip(grads, (inputs["q"], inputs["k"], inputs["v"])):
        assert g.shape == x.shape and g.dtype == x.dtype
    # Row by row too: the whole-tensor norm alone let one zero dq row of thousands pass (G 16, D 256).
    check_grads(grads, want, tol, ("dq", "dk", "dv"))
    # Deterministic: the same inputs give the same bits.
    again = torch.autograd.grad(fsa_jit.selected_attention(**inputs), (inputs["q"], inputs["k"], inputs["v"]), do)
    for g, h in zip(grads, again):
        assert torch.equal(g, h)


def test_nsa_and_fsa_agree(library, poisoned_outputs):
    c = CASES[9]
    inputs, _ = make(c, requires_grad=library.has_backward)
    o_fsa = fsa_jit.selected_attention(**{**inputs, "algorithm": "fsa"})
    o_nsa = fsa_jit.selected_attention(**{**inputs, "algorithm": "nsa"})
    assert rel_err(o_fsa, o_nsa.double()) < TOLERANCE[c["dtype"]][0]
    check_rows(o_fsa, o_nsa, TOLERANCE[c["dtype"]][0])


def test_in_place_views_are_not_copied():
    x = torch.randn(8, 4, 32, device="cuda", dtype=bf16)
    t = view_of(x, "transposed")
    assert attention._kernel_ready(t) is t
    s = view_of(x, "sliced")
    assert attention._kernel_ready(s) is s
    m = view_of(x, "misaligned")
    copy = attention._kernel_ready(m)
    assert copy is not m and copy.data_ptr() % 16 == 0 and torch.equal(copy, m)


def test_tiny_and_empty(library, poisoned_outputs):
    # T = 1: the query sees only itself.
    c = case(bf16, 64, 1, 2, 64, 2, [1])
    inputs, _ = make(c, requires_grad=library.has_backward)
    inputs["topk_idx"] = torch.tensor([[[0, -1]]], dtype=torch.int32, device="cuda")
    o = fsa_jit.selected_attention(**inputs)
    torch.testing.assert_close(o.float(), inputs["v"].detach().float().expand(-1, 2, -1), rtol=0, atol=0)
    # T = 0: nothing to do, nothing launched.
    q = torch.empty(0, 2, 64, device="cuda", dtype=bf16)
    kv = torch.empty(0, 1, 64, device="cuda", dtype=bf16)
    o, lse = fsa_jit.selected_attention(q, kv, kv, torch.empty(1, 0, 2, dtype=torch.int32, device="cuda"),
                                        torch.zeros(2, dtype=torch.int32, device="cuda"), 64, return_lse=True)
    assert o.shape == (0, 2, 64) and lse.shape == (2, 0)


def test_mismatched_devices():
    inputs, _ = make(CASES[0], requires_grad=False)
    inputs["cu_seqlens"] = inputs["cu_seqlens"].cpu()
    with pytest.raises(ValueError, match="cu_seqlens must be a CUDA tensor"):
        fsa_jit.selected_attention(**inputs)


def test_side_stream(backward, poisoned_outputs):
    c = CASES[2]
    inputs, do = make(c, seed=2)
    xs = (inputs["q"], inputs["k"], inputs["v"])
    o = fsa_jit.selected_attention(**inputs)
    grads = torch.autograd.grad(o, xs, do)
    # Fresh leaves: autograd would otherwise accumulate on the first run's stream.
    side_inputs = {**inputs, **{n: inputs[n].detach().requires_grad_() for n in ("q", "k", "v")}}
    side_xs = (side_inputs["q"], side_inputs["k"], side_inputs["v"])
    main = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(main)
    with torch.cuda.stream(side):
        o2 = fsa_jit.selected_attention(**side_inputs)
        grads2 = torch.autograd.grad(o2, side_xs, do)
    main.wait_stream(side)
    torch.testing.assert_close(o2, o, rtol=0, atol=0)
    for g, h in zip(grads2, grads):
        assert torch.equal(g, h)


# The warm-up creates the leaves' AccumulateGrad nodes on the side stream; harmless here.
@pytest.mark.filterwarnings("ignore:The AccumulateGrad node's stream")
def test_cuda_graph(backward, poisoned_outputs):
    c = CASES[0]
    inputs, do = make(c, seed=3)
    xs = (inputs["q"], inputs["k"], inputs["v"])

    def step():
        o = fsa_jit.selected_attention(**inputs)
        return (o,) + torch.autograd.grad(o, xs, do)

    # Warm up on a side stream (as torch's docs do): plans are created here,
    # not during capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()

    # New values in the same buffers, then replay against eager.
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for x in xs:
            x.copy_(torch.randn(x.shape, generator=gen).to(x.dtype))
    graph.replay()
    torch.cuda.synchronize()
    eager = step()
    torch.testing.assert_close(captured[0], eager[0], rtol=0, atol=0)
    for g, h in zip(captured[1:], eager[1:]):
        assert torch.equal(g, h)
    graph.reset()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs a second GPU")
def test_second_device(library, poisoned_outputs):
    c = CASES[1]
    inputs0, do0 = make(c, seed=5, requires_grad=library.has_backward)
    inputs1, do1 = make(c, seed=5, requires_grad=library.has_backward, device="cuda:1")
    o0 = fsa_jit.selected_attention(**inputs0)
    assert torch.cuda.current_device() == 0
    o1 = fsa_jit.selected_attention(**inputs1)  # the current device stays 0
    assert o1.device == torch.device("cuda:1")
    torch.testing.assert_close(o1.cpu(), o0.cpu(), rtol=0, atol=0)
    assert {key[0] for key in fsa_jit.cached_plans()} >= {0, 1}
    if library.has_backward:
        g0 = torch.autograd.grad(o0, (inputs0["q"], inputs0["k"], inputs0["v"]), do0)
        g1 = torch.autograd.grad(o1, (inputs1["q"], inputs1["k"], inputs1["v"]), do1)
        for a, b in zip(g0, g1):
            assert torch.equal(a.cpu(), b.cpu())


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_torch_compile_fullgraph_matches_eager(backward, mode):
    """Forward and backward through torch.compile(fullgraph=True): the custom operators
    trace without a graph break and give eager's bits ('reduce-overhead' replays them
    from CUDA graphs)."""
    c = case(bf16, 64, 2, 4, 32, 6, [70, 1, 129], "thk", q_view="transposed", scale=0.3)
    inputs, do = make(c, seed=8)
    fixed = {n: inputs[n] for n in ("topk_idx", "cu_seqlens", "block_size", "scale", "max_seqlen", "topk_layout")}

    def f(q, k, v):
        o, lse = fsa_jit.selected_attention(q, k, v, **fixed, return_lse=True, workspace_limit="64M")
        return o, lse

    xs = (inputs["q"], inputs["k"], inputs["v"])
    o_eager, lse_eager = f(*xs)
    g_eager = torch.autograd.grad(o_eager, xs, do)

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, mode=None if mode == "default" else mode)
    for _ in range(3):  # reduce-overhead records its graphs on the first calls, then replays
        o, lse = compiled(*xs)
        g = torch.autograd.grad(o, xs, do)
        torch.cuda.synchronize()
        assert torch.equal(o, o_eager)
        assert torch.equal(lse, lse_eager)
        for a, b in zip(g, g_eager):
            assert torch.equal(a, b)
    want_o, _, want_g = reference(inputs, do)
    assert rel_err(o, want_o) < TOLERANCE[bf16][0]
    check_rows(o, want_o, TOLERANCE[bf16][0])
    check_grads(g, want_g, TOLERANCE[bf16][1], ("dq", "dk", "dv"))


def plan_of(c, workspace_limit):
    """The cached plan of case c's shape with this workspace limit (the FSA order), forward or backward."""
    found = [p for key, p in attention._plans.items()
             if key[1:10] == (c["dtype"], c["D"], c["Hkv"] * c["G"], c["Hkv"], c["BK"], c["K"],
                              attention._scale32(c["scale"] or 0.0), _lib.FSA_ALGORITHM_FSA, workspace_limit)]
    assert found, f"no plan of workspace limit {workspace_limit} was made"
    return found[0]


def test_workspace_limit_runs_in_chunks_with_the_same_result(library, poisoned_outputs):
    """A 4 KiB cap against no cap (docs/semantics.md, 'How the work is split'): o, lse and dq are the
    same bits; dk and dv may differ in their dtype's last bit (token chunks regroup their fp32 sums)."""
    c = dict(CASES[0], algorithm="fsa")  # the FSA order runs in workspace chunks (the NSA order needs none)
    inputs, do = make(c, seed=16, requires_grad=library.has_backward)
    xs = (inputs["q"], inputs["k"], inputs["v"])

    def run(limit):
        o, lse = fsa_jit.selected_attention(**inputs, return_lse=True, workspace_limit=limit)
        return (o, lse) + (torch.autograd.grad(o, xs, do) if library.has_backward else ())

    free = run("unlimited")
    capped = run(4096)
    T, batch = inputs["q"].shape[0], inputs["cu_seqlens"].numel() - 1
    free_ws = plan_of(c, -1).workspace_bytes(library, T, batch)
    capped_ws = plan_of(c, 4096).workspace_bytes(library, T, batch)
    assert capped_ws < free_ws, f"the cap must shrink the forward's workspace: {capped_ws} B, uncapped {free_ws} B"
    for name, a, b in zip(("o", "lse", "dq"), capped, free):
        assert a.shape == b.shape and torch.equal(a, b), f"{name}: a capped call must give the uncapped call's bits"
    if library.has_backward:
        for name, a, b in zip(("dk", "dv"), capped[3:], free[3:]):
            assert_one_rounding_step(a, b, f"{name}, capped against uncapped", terms=max(c["seqlens"]) * c["G"])


def test_validate_refuses_bad_metadata_that_a_plain_call_runs_through(library, poisoned_outputs):
    inputs, _ = make(CASES[0], requires_grad=False)  # sequences of 63, 64, 65 and 1 tokens, blocks of 64
    # Check mode accepts -1 and the blocks of a token's own sequence (future ones included); the random
    # selection also points past the sequence's last block, which check mode reports: make those -1.
    cu, bk = inputs["cu_seqlens"].tolist(), CASES[0]["BK"]
    n_blocks = torch.cat([torch.full((e - s,), (e - s + bk - 1) // bk) for s, e in zip(cu[:-1], cu[1:])])
    topk = inputs["topk_idx"].cpu()  # [Hkv, T, K]
    topk[topk >= n_blocks.view(1, -1, 1)] = -1
    inputs["topk_idx"] = topk.to(inputs["topk_idx"].device)
    good = fsa_jit.selected_attention(**inputs)
    want_o, _, _ = reference(inputs)  # the same bits with and without the check, and right
    check_rows(good, want_o, TOLERANCE[CASES[0]["dtype"]][0])
    torch.testing.assert_close(fsa_jit.selected_attention(**inputs, validate=True), good, rtol=0, atol=0)

    falling = inputs["cu_seqlens"].clone()
    falling[1], falling[2] = falling[2].item(), falling[1].item()
    with pytest.raises(fsa_jit.FsaError, match="cu_seqlens falls"):
        fsa_jit.selected_attention(**dict(inputs, cu_seqlens=falling), validate=True)
    out_of_range = inputs["topk_idx"].clone()
    out_of_range[0, 70, 1] = 2  # token 70 is in the 64-token sequence: its one block is block 0
    with pytest.raises(fsa_jit.FsaError, match="first at token 70, KV head 0"):
        fsa_jit.selected_attention(**dict(inputs, topk_idx=out_of_range), validate=True)
    # Without validate the kernels clamp the bounds: a finite, meaningless result. The output is poisoned
    # (NaN) first: without that, the block the raising calls above left unwritten (holding the validate=True
    # call's result, the right one) came back here, and an o left unwritten passed. Rows whose selection
    # the change does not touch stay right.
    o = fsa_jit.selected_attention(**dict(inputs, topk_idx=out_of_range))
    assert torch.isfinite(o).all()
    others = o.clone()
    others[70] = want_o[70].to(o.dtype)  # token 70's rows are meaningless; the others must stay right
    check_rows(others, want_o, TOLERANCE[CASES[0]["dtype"]][0])


def test_plan_choice_reports_the_heuristic_then_the_measured_choice(tmp_path, monkeypatch):
    """With tuning on, the first call of a bucket measures; plan_choice says so before and after."""
    monkeypatch.setenv("FSA_CACHE_DIR", str(tmp_path))
    fsa_jit.set_tuning("on")
    try:
        shape = dict(dtype=bf16, head_dim=64, num_q_heads=4, num_kv_heads=2, block_size=64, top_k=4)
        before = fsa_jit.plan_choice(40, **shape)
        assert before["source"] == "heuristic" and before["will_measure"]
        assert before["bucket_tokens"] == 64 and before["candidates"] == 2
        inputs, _ = make(case(bf16, 64, 2, 2, 64, 4, [17, 23]), requires_grad=False)
        o = fsa_jit.selected_attention(**inputs)  # measures both orders, then runs the winner
        want_o, _, _ = reference(inputs)
        assert rel_err(o, want_o) < TOLERANCE[bf16][0]
        check_rows(o, want_o, TOLERANCE[bf16][0])
        fsa_jit.clear_plans()  # a new plan reads the record from the cache directory
        after = fsa_jit.plan_choice(40, **shape)
        assert after["source"] == "measured" and not after["will_measure"]
        assert after["algorithm"] in ("fsa", "nsa")
    finally:
        fsa_jit.set_tuning(None)
        fsa_jit.clear_plans()
