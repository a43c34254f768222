"""The NSA branches and the whole layer on the GPU against the plain PyTorch
layer (plain_nsa.py, float64 from the same rounded inputs): outputs, lse,
the block selection, and the gradients of q, k, v, the compressed keys and
values and the gates. Small shapes; the first run compiles each plan's
kernels."""

import math

import pytest

from helpers import cuda_torch_or_skip, load_library_or_skip, skip_or_fail

torch = cuda_torch_or_skip()  # skips without CUDA (fails under FSA_TEST_REQUIRE_GPU)

import fsa_jit  # noqa: E402
from fsa_jit import _lib, _nsa_node  # noqa: E402
from fsa_jit.nsa import NSAttention, compress_mean, nsa_attention  # noqa: E402
from helpers import check_grads, check_rows, cu_seqlens_of, rel_err  # noqa: E402
from plain_nsa import nsa_layer  # noqa: E402

TOLERANCE = {torch.bfloat16: (1e-2, 2e-2), torch.float16: (3e-3, 6e-3)}  # relative norm: (o, gradients)
LSE_ATOL = 2e-3
TIE = 1e-3  # block scores closer than this may come out in either order


@pytest.fixture(scope="module", autouse=True)
def library():
    return load_library_or_skip()


def has_window_backward(lib):
    return getattr(lib.cdll, "fsa_window_attention_bwd", None) is not None


def selected_takes_value_dim():
    return any(name == "value_dim" for name, _ in _lib.fsa_selected_attention_desc._fields_)


bf16, f16 = torch.bfloat16, torch.float16


def case(dtype, Dk, Dv, Hkv, G, l, d, BK, K, W, seqlens, init=1, local=2):
    return dict(dtype=dtype, Dk=Dk, Dv=Dv, Hkv=Hkv, G=G, l=l, d=d, BK=BK, K=K, W=W, seqlens=seqlens, init=init,
                local=local)


CASES = [
    case(bf16, 64, 64, 2, 1, 32, 16, 64, 4, 100, [300, 65, 1, 130]),
    case(f16, 128, 128, 1, 4, 16, 8, 32, 6, [48, 16, 100, 1], [257, 31]),  # a window per query head
    case(bf16, 64, 64, 1, 16, 32, 16, 64, 3, 64, [200, 90], init=0, local=1),
    case(bf16, 192, 128, 2, 2, 32, 16, 64, 4, 80, [190, 70]),  # Dk != Dv
]


def case_id(c):
    return (f"{str(c['dtype'])[6:]}-dk{c['Dk']}-dv{c['Dv']}-hkv{c['Hkv']}-g{c['G']}-l{c['l']}-d{c['d']}-bk{c['BK']}"
            f"-k{c['K']}-w{'x'.join(map(str, c['W'])) if isinstance(c['W'], list) else c['W']}"
            f"-b{len(c['seqlens'])}")


def make(c, seed=0):
    gen = torch.Generator().manual_seed(seed)
    cu = cu_seqlens_of(c["seqlens"])
    T, Hkv, Hq = cu[-1], c["Hkv"], c["Hkv"] * c["G"]

    def rand(*shape, dtype=c["dtype"]):
        return torch.randn(*shape, generator=gen).to(device="cuda", dtype=dtype)

    cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda")
    k, v = rand(T, Hkv, c["Dk"]), rand(T, Hkv, c["Dv"])
    # Independent compressed keys and values (a learned compression would be), with the caller's offsets.
    _, cu_c = compress_mean(k, cu_t, c["l"], c["d"])
    Tc = int(cu_c[-1])
    x = dict(q=rand(T, Hq, c["Dk"]), k=k, v=v, k_cmp=rand(Tc, Hkv, c["Dk"]), v_cmp=rand(Tc, Hkv, c["Dv"]),
             g_cmp=torch.rand(T, Hq, generator=gen).cuda(), g_sel=torch.rand(T, Hq, generator=gen).cuda(),
             g_win=torch.rand(T, Hq, generator=gen).cuda())
    for t in x.values():
        t.requires_grad_()
    do = rand(T, Hq, c["Dv"])
    params = dict(cu_seqlens=cu_t, cu_seqlens_c=cu_c, kernel_size=c["l"], stride=c["d"], block_size=c["BK"],
                  top_k=c["K"], window=c["W"], init_blocks=c["init"], local_blocks=c["local"])
    return x, params, do


def plain(x, params, topk=None):
    """The plain layer in float64 on the same (rounded) inputs, with float64 leaves for the gradients. A gate
    given as a number sits in params; k_win and v_win, when x has them, feed the window branch."""
    leaves = {n: t.detach().double().requires_grad_() for n, t in x.items()}
    p = dict(params)
    gates = [leaves[n] if n in leaves else p.pop(n) for n in ("g_cmp", "g_sel", "g_win")]
    out = nsa_layer(leaves["q"], leaves["k"], leaves["v"], leaves["k_cmp"], leaves["v_cmp"], *gates,
                    p.pop("cu_seqlens"), p.pop("cu_seqlens_c"), p.pop("kernel_size"), p.pop("stride"),
                    p.pop("block_size"), p.pop("top_k"), p.pop("window"), topk=topk, k_win=leaves.get("k_win"),
                    v_win=leaves.get("v_win"), **p)
    return out, leaves


def check_lse(lse, want):
    assert torch.equal(torch.isneginf(lse), torch.isneginf(want)), "rows without keys must give lse = -inf"
    finite = torch.isfinite(want)
    if finite.any():
        assert (lse[finite].double() - want[finite]).abs().max().item() < LSE_ATOL


def forced(c, own, init, local):
    return c < init or c > own - local


def row_is_a_valid_selection(row, scores, own, top_k, init, local):
    """row (the kernel's) selects by the rule when scores closer than TIE may swap."""
    taken = [c for c in row if c >= 0]
    want_count = min(top_k, own + 1)
    if taken != sorted(set(taken)) or len(taken) != want_count or row[want_count:] != [-1] * (top_k - want_count):
        return False
    forced_blocks = [c for c in range(own + 1) if forced(c, own, init, local)][:want_count]
    if any(c not in taken for c in forced_blocks):
        return False
    free_taken = [scores[c] for c in taken if c not in forced_blocks]
    free_left = [scores[c] for c in range(own + 1) if c not in taken and not forced(c, own, init, local)]
    return not free_taken or not free_left or min(free_taken) >= max(free_left) - TIE


def row_has_a_near_tie(want_row, scores, own, init, local):
    """Whether a block the plain layer took by score and one it left out score within TIE (exact zeros,
    blocks no visible compressed token overlaps, are ordered by the tie rule and are no near tie)."""
    free_taken = [scores[c] for c in want_row if c >= 0 and not forced(c, own, init, local)]
    free_left = [scores[c] for c in range(own + 1) if c not in want_row and not forced(c, own, init, local)]
    if not free_taken or not free_left:
        return False
    lo, hi = min(free_taken), max(free_left)
    return lo - hi <= TIE and not (lo == 0.0 and hi == 0.0)


def check_selection(got, out, params):
    """The kernel's selection equals the plain layer's on every row without a near tie, and is a valid
    selection on the others (few of them)."""
    cu = params["cu_seqlens"].tolist()
    got, want = got.cpu(), out["topk"].cpu()
    rows = near = 0
    for (start, h), scores in out["scores"].items():
        scores = scores.cpu().tolist()
        end = next(e for s, e in zip(cu, cu[1:]) if s == start)
        for i in range(end - start):
            own, t = i // params["block_size"], start + i
            g_row, w_row = got[t, h].tolist(), want[t, h].tolist()
            rows += 1
            if row_has_a_near_tie(w_row, scores[i], own, params["init_blocks"], params["local_blocks"]):
                near += 1
                assert row_is_a_valid_selection(g_row, scores[i], own, params["top_k"], params["init_blocks"],
                                                params["local_blocks"]), f"token {t}, head {h}: {g_row}"
            else:
                assert g_row == w_row, f"token {t}, KV head {h}: kernel {g_row}, plain layer {w_row}"
    assert near <= rows // 20, f"{near} of {rows} rows have near ties: the test would check little"


@pytest.mark.parametrize("c", CASES, ids=case_id)
def test_compressed_attention_and_selection(c, poisoned_outputs):
    x, params, do = make(c)
    o, lse, topk = fsa_jit.compressed_attention(
        x["q"], x["k_cmp"], x["v_cmp"], params["cu_seqlens"], params["cu_seqlens_c"], c["l"], c["d"], top_k=c["K"],
        block_size=c["BK"], init_blocks=c["init"], local_blocks=c["local"], validate=True)
    assert o.shape == (x["q"].shape[0], x["q"].shape[1], c["Dv"]) and o.dtype == c["dtype"]
    assert topk.shape == (x["q"].shape[0], c["Hkv"], c["K"]) and topk.dtype == torch.int32
    out, leaves = plain(x, params)
    assert rel_err(o, out["o_cmp"]) < TOLERANCE[c["dtype"]][0]
    check_rows(o, out["o_cmp"], TOLERANCE[c["dtype"]][0])
    check_lse(lse, out["lse_cmp"])
    assert torch.count_nonzero(o[torch.isneginf(out["lse_cmp"]).t()]) == 0
    check_selection(topk, out, params)

    grads = torch.autograd.grad(o, (x["q"], x["k_cmp"], x["v_cmp"]), do)
    want = torch.autograd.grad(out["o_cmp"], (leaves["q"], leaves["k_cmp"], leaves["v_cmp"]), do.double())
    check_grads(grads, want, TOLERANCE[c["dtype"]][1], ("dq", "dk_cmp", "dv_cmp"))
    again = torch.autograd.grad(fsa_jit.compressed_attention(
        x["q"], x["k_cmp"], x["v_cmp"], params["cu_seqlens"], params["cu_seqlens_c"], c["l"], c["d"])[0],
        (x["q"], x["k_cmp"], x["v_cmp"]), do)
    for g, h in zip(grads, again):
        assert torch.equal(g, h), "the backward must be deterministic"


@pytest.mark.parametrize("c", CASES, ids=case_id)
def test_window_attention(library, c, poisoned_outputs):
    x, params, do = make(c, seed=1)
    with torch.no_grad():
        o, lse = fsa_jit.window_attention(x["q"], x["k"], x["v"], params["cu_seqlens"], c["W"], return_lse=True,
                                          validate=True)
    out, leaves = plain(x, params)
    assert rel_err(o, out["o_win"]) < TOLERANCE[c["dtype"]][0]
    check_rows(o, out["o_win"], TOLERANCE[c["dtype"]][0])
    check_lse(lse, out["lse_win"])
    if not has_window_backward(library):
        skip_or_fail(f"{library.path} has no sliding-window backward")
    o = fsa_jit.window_attention(x["q"], x["k"], x["v"], params["cu_seqlens"], c["W"])
    grads = torch.autograd.grad(o, (x["q"], x["k"], x["v"]), do)
    check_rows(o, out["o_win"], TOLERANCE[c["dtype"]][0])  # the call with gradients: its own plan
    want = torch.autograd.grad(out["o_win"], (leaves["q"], leaves["k"], leaves["v"]), do.double())
    check_grads(grads, want, TOLERANCE[c["dtype"]][1], ("dq", "dk", "dv"))


def needs_the_whole_layer(library, c, backward):
    if c["Dk"] != c["Dv"] and not selected_takes_value_dim():
        skip_or_fail("this libfsa's selected attention needs Dk == Dv")
    if backward and not has_window_backward(library):
        skip_or_fail(f"{library.path} has no sliding-window backward")


@pytest.mark.parametrize("c", CASES, ids=case_id)
def test_the_layer_against_the_plain_layer(library, c, poisoned_outputs):
    needs_the_whole_layer(library, c, backward=False)
    x, params, do = make(c, seed=2)
    with torch.no_grad():
        o, topk = nsa_attention(**x, **params, return_topk=True, validate=True)
    out, _ = plain(x, params, topk=topk)  # the kernel's selection, once shown to follow the rule
    check_selection(topk, out, params)
    assert o.dtype == c["dtype"] and o.shape == (x["q"].shape[0], x["q"].shape[1], c["Dv"])
    assert rel_err(o, out["o"]) < TOLERANCE[c["dtype"]][0]
    check_rows(o, out["o"], TOLERANCE[c["dtype"]][0])


@pytest.mark.parametrize("c", CASES, ids=case_id)
def test_the_layer_gradients(library, c, poisoned_outputs):
    needs_the_whole_layer(library, c, backward=True)
    x, params, do = make(c, seed=3)
    o, topk = nsa_attention(**x, **params, return_topk=True)
    names = list(x)
    grads = torch.autograd.grad(o, [x[n] for n in names], do)
    out, leaves = plain(x, params, topk=topk)
    check_selection(topk, out, params)
    # The node's own o (test_the_layer_against_the_plain_layer checks the operators' path, validate=True).
    assert rel_err(o, out["o"]) < TOLERANCE[c["dtype"]][0]
    check_rows(o, out["o"], TOLERANCE[c["dtype"]][0])
    want = torch.autograd.grad(out["o"], [leaves[n] for n in names], do.double())
    for name, g in zip(names, grads):
        assert g.shape == x[name].shape and g.dtype == x[name].dtype, name
    check_grads(grads, want, TOLERANCE[c["dtype"]][1], ["d" + n for n in names])


def layer_and_gradients(x, params, do):
    o, topk = nsa_attention(**x, **params, return_topk=True)
    return (o, topk) + torch.autograd.grad(o, list(x.values()), do)


@pytest.fixture
def node_calls(monkeypatch):
    """Counts the calls the layer's node served: {"layer": first calls of a key, "cached": later ones}. The
    node-against-operators comparisons are empty when the node declines (returns None) and every call takes
    the operators; the tests check it did not."""
    taken = {"layer": 0, "cached": 0}
    for name in taken:
        real = getattr(_nsa_node, name)

        def spy(*args, _real=real, _name=name):
            out = _real(*args)
            taken[_name] += out is not None
            return out

        monkeypatch.setattr(_nsa_node, name, spy)
    return taken


@pytest.mark.parametrize("c", CASES, ids=case_id)
def test_the_layer_node_computes_what_the_operators_compute(library, c, monkeypatch, poisoned_outputs, node_calls):
    needs_the_whole_layer(library, c, backward=True)
    x, params, do = make(c, seed=8)
    node = layer_and_gradients(x, params, do)
    assert node_calls["layer"] + node_calls["cached"] == 1, "the eager call must take the layer's node"
    monkeypatch.setattr(_nsa_node, "layer", lambda *args: None)  # every call through the operators
    monkeypatch.setattr(_nsa_node, "cached", lambda *args: None)
    ops = layer_and_gradients(x, params, do)
    names = ["o", "topk"] + ["d" + n for n in x]
    for name, a, b in zip(names, node, ops):
        same_as_the_operators(name, a, b)
    # The operators' gradients (what torch.compile runs) against the float64 layer too: the comparison with
    # the node above is looser than the reference checks.
    out, leaves = plain(x, params, topk=ops[1])
    want = torch.autograd.grad(out["o"], [leaves[n] for n in x], do.double())
    check_grads(ops[2:], want, TOLERANCE[c["dtype"]][1], ["d" + n for n in x])


def same_as_the_operators(name, a, b):
    """The node's forward outputs are the operators' bits. Its gradients are not: the node gives each branch the
    layer's dout and the gate (in fp32, inside the probabilities), the operators a gated dout rounded to the
    dtype first, and dq's three branches are summed in another order."""
    if name.startswith("d"):
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2 * b.abs().max().item(), msg=name)
    else:
        assert torch.equal(a, b), f"{name}: the layer's node and the operators differ"


@pytest.mark.parametrize("c", [CASES[0], CASES[3]], ids=case_id)
@pytest.mark.parametrize("path", ["node", "operators"])
def test_a_scale_and_window_keys_of_their_own_match_the_plain_layer(library, c, path, poisoned_outputs, node_calls):
    """scale and k_win / v_win (nsa_attention's documented arguments) reach every branch, through the layer's
    node (with gradients, k_win's and v_win's included) and through the operators (validate=True). Every other
    GPU test of the layer and of the compressed and window branches runs the default 1/sqrt(Dk) and the window
    on k and v, so a branch handed the default scale, or the window reading k, v, passed them all."""
    needs_the_whole_layer(library, c, backward=path == "node")
    x, params, do = make(c, seed=21)
    gen = torch.Generator().manual_seed(22)
    for name, like in (("k_win", x["k"]), ("v_win", x["v"])):
        x[name] = torch.randn(like.shape, generator=gen).to(device="cuda", dtype=like.dtype).requires_grad_()
    params = dict(params, scale=1.7 / math.sqrt(c["Dk"]))  # the default differs from it by 1.7x
    tol = TOLERANCE[c["dtype"]]
    if path == "operators":
        with torch.no_grad():
            o, topk = nsa_attention(**x, **params, return_topk=True, validate=True)
        assert node_calls["layer"] + node_calls["cached"] == 0
    else:
        o, topk = nsa_attention(**x, **params, return_topk=True)
        assert node_calls["layer"] + node_calls["cached"] == 1, "the eager call must take the layer's node"
    out, leaves = plain(x, params, topk=topk)
    check_selection(topk, out, params)  # the scale moves the compressed probabilities: the selection too
    assert rel_err(o, out["o"]) < tol[0]
    check_rows(o, out["o"], tol[0])
    if path == "node":
        names = list(x)
        grads = torch.autograd.grad(o, [x[n] for n in names], do)
        want = torch.autograd.grad(out["o"], [leaves[n] for n in names], do.double())
        check_grads(grads, want, tol[1], ["d" + n for n in names])


@pytest.mark.parametrize("c", CASES[:2], ids=case_id)
def test_the_branches_take_a_scale_of_their_own(library, c, poisoned_outputs):
    """compressed_attention (its selection too) and window_attention with a non-default scale, forward and
    backward, against the plain layer's branches."""
    x, params, do = make(c, seed=23)
    params = dict(params, scale=0.6 / math.sqrt(c["Dk"]))
    tol = TOLERANCE[c["dtype"]]
    o_c, lse_c, topk = fsa_jit.compressed_attention(
        x["q"], x["k_cmp"], x["v_cmp"], params["cu_seqlens"], params["cu_seqlens_c"], c["l"], c["d"],
        scale=params["scale"], top_k=c["K"], block_size=c["BK"], init_blocks=c["init"], local_blocks=c["local"])
    window_grads = has_window_backward(library)
    with torch.set_grad_enabled(window_grads):
        o_w, lse_w = fsa_jit.window_attention(x["q"], x["k"], x["v"], params["cu_seqlens"], c["W"],
                                              scale=params["scale"], return_lse=True)
    out, leaves = plain(x, params)
    check_selection(topk, out, params)
    for o, lse, name in ((o_c, lse_c, "cmp"), (o_w, lse_w, "win")):
        assert rel_err(o, out["o_" + name]) < tol[0]
        check_rows(o, out["o_" + name], tol[0], what="o_" + name)
        check_lse(lse, out["lse_" + name])
    grads = torch.autograd.grad(o_c, (x["q"], x["k_cmp"], x["v_cmp"]), do)
    want = torch.autograd.grad(out["o_cmp"], (leaves["q"], leaves["k_cmp"], leaves["v_cmp"]), do.double(),
                               retain_graph=True)
    check_grads(grads, want, tol[1], ("dq", "dk_cmp", "dv_cmp"))
    if window_grads:
        grads = torch.autograd.grad(o_w, (x["q"], x["k"], x["v"]), do)
        want = torch.autograd.grad(out["o_win"], (leaves["q"], leaves["k"], leaves["v"]), do.double())
        check_grads(grads, want, tol[1], ("dq", "dk", "dv"))


GATE_FORMS = {
    "bf16 [T, Hq, 1]": lambda g: g.detach().to(torch.bfloat16).unsqueeze(2).requires_grad_(),
    "fp16 [T, Hq]": lambda g: g.detach().half().requires_grad_(),
    "fp32 [Hq], broadcast": lambda g: g.detach()[0].clone().requires_grad_(),
    "a number": lambda g: 0.75,
}


@pytest.mark.parametrize("form", list(GATE_FORMS))
def test_the_layer_node_takes_every_gate_form_as_the_operators_do(library, form, monkeypatch, poisoned_outputs,
                                                                  node_calls):
    c = CASES[0]
    needs_the_whole_layer(library, c, backward=True)
    x, params, do = make(c, seed=11)
    x["g_sel"] = GATE_FORMS[form](x["g_sel"])
    if not isinstance(x["g_sel"], torch.Tensor):
        del x["g_sel"]
        params = dict(params, g_sel=0.75)
    node = [layer_and_gradients(x, params, do)]
    assert node_calls["layer"] + node_calls["cached"] == 1, "the eager call must take the layer's node"
    cached_before = node_calls["cached"]
    node.append(layer_and_gradients(x, params, do))
    assert node_calls["cached"] == cached_before + 1, "the second call must take the checked key's path"
    # Against the plain layer too: node and operators share _gates.view / as_rows (how a broadcast gate or a
    # number becomes float32 [T, Hq]), so their agreement says nothing about that mapping.
    out, leaves = plain(x, params, topk=node[0][1])
    check_selection(node[0][1], out, params)
    assert rel_err(node[0][0], out["o"]) < TOLERANCE[c["dtype"]][0]
    check_rows(node[0][0], out["o"], TOLERANCE[c["dtype"]][0])
    want = torch.autograd.grad(out["o"], [leaves[n] for n in x], do.double())
    check_grads(node[0][2:], want, TOLERANCE[c["dtype"]][1], ["d" + n for n in x])
    monkeypatch.setattr(_nsa_node, "layer", lambda *args: None)
    monkeypatch.setattr(_nsa_node, "cached", lambda *args: None)
    ops = layer_and_gradients(x, params, do)
    names = ["o", "topk"] + ["d" + n for n in x]
    for name, a, b, again in zip(names, node[0], ops, node[1]):
        assert torch.equal(a, again), f"{name}: the checked key's call differs from the first"
        assert a.dtype == b.dtype and a.shape == b.shape, name
        same_as_the_operators(name, a, b)


def test_a_checked_layout_still_rejects_bad_parameters(library):
    c = CASES[0]
    needs_the_whole_layer(library, c, backward=False)
    x, params, _ = make(c, seed=12)
    with torch.no_grad():
        nsa_attention(**x, **params)  # checked: the key's next calls skip the checks
        with pytest.raises(TypeError, match="kernel_size"):
            nsa_attention(**x, **dict(params, kernel_size=bool(params["kernel_size"])))
        with pytest.raises(ValueError, match="top_k"):
            nsa_attention(**x, **dict(params, top_k=0))
        with pytest.raises(TypeError, match="g_win"):
            nsa_attention(**dict(x, g_win=x["g_win"].int()), **params)


def test_differentiating_the_layers_gradients_raises(library, monkeypatch):
    # create_graph=True: the kernels have no second derivative, so a penalty on the gradients must fail
    # through the node and through the operators alike, never add zero in silence.
    c = CASES[0]
    needs_the_whole_layer(library, c, backward=True)
    x, params, do = make(c, seed=11)
    for through_operators in (False, True):
        if through_operators:
            monkeypatch.setattr(_nsa_node, "layer", lambda *args: None)
            monkeypatch.setattr(_nsa_node, "cached", lambda *args: None)
        o = nsa_attention(**x, **params)
        dq, = torch.autograd.grad(o, x["q"], do, create_graph=True)
        assert dq.requires_grad
        with pytest.raises(RuntimeError, match="nsa_attention|selected_attention|autograd formula|derivative"):
            dq.float().pow(2).sum().backward()


@pytest.mark.parametrize("c", CASES[:2], ids=case_id)
def test_the_layer_node_gives_the_same_bits_every_call(library, c, poisoned_outputs):
    needs_the_whole_layer(library, c, backward=True)
    x, params, do = make(c, seed=9)
    first = layer_and_gradients(x, params, do)
    for _ in range(2):
        for a, b in zip(first, layer_and_gradients(x, params, do)):
            assert torch.equal(a, b), "the layer and its gradients must be deterministic"


def test_the_layer_and_its_gradients_replay_in_a_cuda_graph(library, poisoned_outputs):
    c = CASES[3]
    needs_the_whole_layer(library, c, backward=True)
    x, params, do = make(c, seed=10)

    def leaves(values):  # new leaves: their gradient accumulators belong to the stream that first uses them
        return {n: t.detach().clone().requires_grad_() for n, t in values.items()}

    eager_o = layer_and_gradients(leaves(x), params, do)[0]  # the plans and the second stream, made before capture
    captured_x = leaves(x)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = layer_and_gradients(captured_x, params, do)
    with torch.no_grad():
        captured_x["q"].copy_(torch.randn_like(captured_x["q"]))
        captured_x["g_win"].copy_(torch.rand_like(captured_x["g_win"]))
    graph.replay()
    again = layer_and_gradients(leaves(captured_x), params, do)
    torch.cuda.synchronize()
    for a, b in zip(captured, again):
        assert torch.equal(a, b), "the replay must compute what an eager call computes on the new inputs"
    assert not torch.equal(captured[0], eager_o)


def test_the_module_compresses_k_and_v_by_mean_pooling(library, poisoned_outputs):
    c = CASES[0]
    needs_the_whole_layer(library, c, backward=False)
    x, params, _ = make(c, seed=4)
    layer = NSAttention(kernel_size=c["l"], stride=c["d"], block_size=c["BK"], top_k=c["K"], window=c["W"])
    with torch.no_grad():
        o = layer(x["q"], x["k"], x["v"], x["g_cmp"], x["g_sel"], x["g_win"], params["cu_seqlens"])
        k_cmp, cu_c = compress_mean(x["k"], params["cu_seqlens"], c["l"], c["d"])
        v_cmp, _ = compress_mean(x["v"], params["cu_seqlens"], c["l"], c["d"])
        want = nsa_attention(x["q"], x["k"], x["v"], k_cmp, v_cmp, x["g_cmp"], x["g_sel"], x["g_win"],
                             params["cu_seqlens"], cu_c, kernel_size=c["l"], stride=c["d"], block_size=c["BK"],
                             top_k=c["K"], window=c["W"])
    assert torch.equal(o, want)


def test_validate_reports_bad_offsets_on_the_device(poisoned_outputs):
    x, params, _ = make(CASES[1])  # sequences of 257 and 31 tokens; kernel 16, stride 8: 31 and 2 compressed tokens
    with torch.no_grad():
        good = fsa_jit.compressed_attention(x["q"], x["k_cmp"], x["v_cmp"], params["cu_seqlens"],
                                            params["cu_seqlens_c"], 16, 8)
        checked = fsa_jit.compressed_attention(x["q"], x["k_cmp"], x["v_cmp"], params["cu_seqlens"],
                                               params["cu_seqlens_c"], 16, 8, validate=True)
    assert torch.equal(good[0], checked[0]) and torch.equal(good[1], checked[1])
    bad = params["cu_seqlens_c"].clone()
    bad[1] = int(bad[-1]) + 1
    with pytest.raises(fsa_jit.FsaError, match="cu_seqlens_c falls"):
        fsa_jit.compressed_attention(x["q"], x["k_cmp"], x["v_cmp"], params["cu_seqlens"], bad, 16, 8, validate=True)
    shifted = params["cu_seqlens_c"].clone()
    shifted[1] -= 1  # one compressed token moved from sequence 0 to sequence 1
    with pytest.raises(fsa_jit.FsaError, match=r"compressed-token count other than .* \(first at sequence 0\)"):
        fsa_jit.compressed_attention(x["q"], x["k_cmp"], x["v_cmp"], params["cu_seqlens"], shifted, 16, 8,
                                     validate=True)
    falling = params["cu_seqlens"].clone()
    falling[1] = int(falling[-1]) + 5
    with pytest.raises(fsa_jit.FsaError, match="cu_seqlens falls"):
        fsa_jit.window_attention(x["q"], x["k"], x["v"], falling, 16, validate=True)
    with torch.no_grad():
        assert torch.equal(fsa_jit.window_attention(x["q"], x["k"], x["v"], params["cu_seqlens"], 16, validate=True),
                           fsa_jit.window_attention(x["q"], x["k"], x["v"], params["cu_seqlens"], 16))


def test_no_compressed_token_gives_zero_and_minus_infinity(poisoned_outputs):
    # Sequences shorter than the kernel: nothing compressed, nothing visible.
    q = torch.randn(20, 2, 64, device="cuda", dtype=bf16, requires_grad=True)
    k = torch.empty(0, 1, 64, device="cuda", dtype=bf16, requires_grad=True)
    cu = torch.tensor([0, 10, 20], dtype=torch.int32, device="cuda")
    cu_c = torch.zeros(3, dtype=torch.int32, device="cuda")
    o, lse, topk = fsa_jit.compressed_attention(q, k, k, cu, cu_c, 32, 16, top_k=2, block_size=16)
    assert torch.count_nonzero(o) == 0 and torch.isneginf(lse).all()
    own = torch.arange(10, device="cuda").repeat(2) // 16
    assert torch.equal(topk[:, 0, 0], own.int()) and (topk[:, 0, 1] == -1).all()
    dq, dk = torch.autograd.grad(o, (q, k), torch.ones_like(o))
    assert torch.count_nonzero(dq) == 0 and dk.shape == k.shape
    assert math.isinf(lse[0, 0].item())


def test_the_layer_compiles_into_one_graph_with_its_gradients(library, monkeypatch):
    c = CASES[0]
    needs_the_whole_layer(library, c, backward=True)
    x, params, do = make(c, seed=5)
    names = list(x)
    with monkeypatch.context() as m:
        m.setattr(_nsa_node, "layer", lambda *args: None)  # eager through the operators, as compiled code runs
        m.setattr(_nsa_node, "cached", lambda *args: None)
        o = nsa_attention(**x, **params)
        want = torch.autograd.grad(o, [x[n] for n in names], do)
    compiled = torch.compile(nsa_attention, backend="aot_eager", fullgraph=True)
    o_c = compiled(**x, **params)
    got = torch.autograd.grad(o_c, [x[n] for n in names], do)
    # The same operators run; only the gate arithmetic around them may be rearranged by the tracer.
    torch.testing.assert_close(o_c, o)
    for name, g, w in zip(names, got, want):
        torch.testing.assert_close(g, w, msg=lambda m: f"d{name} under torch.compile: {m}")


def test_the_branches_replay_in_a_cuda_graph(library, poisoned_outputs):
    c = CASES[1]
    x, params, _ = make(c, seed=6)
    q, k, v, k_cmp, v_cmp = (x[n].detach() for n in ("q", "k", "v", "k_cmp", "v_cmp"))
    cu, cu_c = params["cu_seqlens"], params["cu_seqlens_c"]

    def run():
        o_c, _, topk = fsa_jit.compressed_attention(q, k_cmp, v_cmp, cu, cu_c, c["l"], c["d"], top_k=c["K"],
                                                    block_size=c["BK"])
        return o_c, topk, fsa_jit.window_attention(q, k, v, cu, c["W"])

    eager = run()  # makes the plans: compiling must not happen under capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = run()
    q.copy_(torch.randn_like(q))  # new inputs in place, then replay
    graph.replay()
    again = run()
    torch.cuda.synchronize()
    for a, b in zip(captured, again):
        assert torch.equal(a, b), "the replay must compute what an eager call computes on the new inputs"
    assert not torch.equal(captured[0], eager[0])
