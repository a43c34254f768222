"""What kvcache_attention hands libfsa, without a GPU: a fake library records the plan key and the
argument structure of each call, CPU tensors stand in for CUDA ones (the device check, the stream and
the device ordinal are the only parts replaced). The GPU tests (test_kvcache.py) check the results."""

import ctypes

import pytest

torch = pytest.importorskip("torch")

from fsa_jit import _lib, kvcache  # noqa: E402


class FakeLibrary:
    def __init__(self):
        self.plans = []
        self.calls = []
        self.counters = []  # the workspace's first 256 bytes as each call found them

    def check(self, status, function=None):
        if status:
            raise _lib.FsaError(status, "FAKE", "fake failure", function)


@pytest.fixture
def fake(monkeypatch):
    lib = FakeLibrary()

    def plan(library, key):
        lib.plans.append(key)
        return 4242, 512, 256  # handle, workspace bytes, counter bytes

    def attention(handle, ref, stream):
        a = ref._obj
        lib.counters.append(ctypes.string_at(a.workspace, 256) if a.workspace else None)
        view = lambda t: (t.ptr, t.token_stride, t.head_stride)  # noqa: E731
        lib.calls.append({"handle": handle, "stream": stream, "num_query_tokens": a.num_query_tokens,
                          "batch": a.batch, "cu_seqlens_q": a.cu_seqlens_q, "k_page_stride": a.k_page_stride,
                          "v_page_stride": a.v_page_stride, "num_pages": a.num_pages, "block_table": a.block_table,
                          "block_table_stride": a.block_table_stride, "max_pages_per_seq": a.max_pages_per_seq,
                          "seqused_k": a.seqused_k, "topk_length": a.topk_length, "lse": a.lse,
                          "workspace": a.workspace, "workspace_bytes": a.workspace_bytes,
                          "q": view(a.q), "k_cache": view(a.k_cache), "v_cache": view(a.v_cache),
                          "topk": view(a.topk), "o": view(a.o)})
        return 0

    monkeypatch.setattr(_lib, "get", lambda: lib)
    monkeypatch.setattr(kvcache, "_plan", plan)
    monkeypatch.setattr(kvcache, "_fn", lambda library, name: {"fsa_kvcache_attention": attention}[name])
    monkeypatch.setattr(kvcache, "_require_cuda", lambda *tensors: None)
    monkeypatch.setattr(kvcache, "_stream", lambda device: 77)
    monkeypatch.setattr(kvcache, "_device_index", lambda device: 0)
    return lib


def problem(layout="thk", D=64, Dv=None, Hq=8, Hkv=2, page=16, pages=7, K=4, lengths=False, hnd=False):
    """Two sequences (1 and 3 new tokens) over a paged cache, on the CPU."""
    tq = 4
    if hnd:  # [num_pages, Hkv, page_size, D] seen as [num_pages, page_size, Hkv, D]
        k_cache = torch.randn(pages, Hkv, page, D).to(torch.bfloat16).permute(0, 2, 1, 3)
        v_cache = torch.randn(pages, Hkv, page, Dv or D).to(torch.bfloat16).permute(0, 2, 1, 3)
    else:
        k_cache = torch.randn(pages, page, Hkv, D).to(torch.bfloat16)
        v_cache = torch.randn(pages, page, Hkv, Dv or D).to(torch.bfloat16)
    topk = {"thk": torch.zeros(tq, Hkv, K, dtype=torch.int32), "hkt": torch.zeros(Hkv, tq, K, dtype=torch.int32),
            "shared": torch.zeros(tq, K, dtype=torch.int32)}[layout]
    return dict(q=torch.randn(tq, Hq, D).to(torch.bfloat16), k_cache=k_cache, v_cache=v_cache,
                cu_seqlens_q=torch.tensor([0, 1, tq], dtype=torch.int32),
                seqused_k=torch.tensor([20, 40], dtype=torch.int32),
                block_table=torch.zeros(2, 5, dtype=torch.int32)[:, :4],
                topk_idx=topk, topk_layout="hkt" if layout == "hkt" else "thk", block_size=16,
                topk_length=torch.full((tq,), 3, dtype=torch.int32) if lengths else None)


@pytest.mark.parametrize("layout", ["thk", "hkt", "shared"])
@pytest.mark.parametrize("hnd", [False, True])
def test_the_call_hands_the_library_every_tensor_by_its_strides(fake, layout, hnd):
    p = problem(layout, hnd=hnd)
    o = kvcache.kvcache_attention(**p)
    (c,) = fake.calls
    q, k, v, topk = p["q"], p["k_cache"], p["v_cache"], p["topk_idx"]
    assert o.shape == (4, 8, 64) and o.dtype == torch.bfloat16
    assert c["handle"] == 4242 and c["stream"] == 77 and c["num_query_tokens"] == 4 and c["batch"] == 2
    assert c["q"] == (q.data_ptr(), q.stride(0), q.stride(1))
    assert c["k_cache"] == (k.data_ptr(), k.stride(1), k.stride(2)) and c["k_page_stride"] == k.stride(0)
    assert c["v_cache"] == (v.data_ptr(), v.stride(1), v.stride(2)) and c["v_page_stride"] == v.stride(0)
    assert c["num_pages"] == 7 and c["max_pages_per_seq"] == 4
    assert c["block_table"] == p["block_table"].data_ptr() and c["block_table_stride"] == 5
    assert c["cu_seqlens_q"] == p["cu_seqlens_q"].data_ptr() and c["seqused_k"] == p["seqused_k"].data_ptr()
    token_stride, head_stride = {"thk": (topk.stride(0), topk.stride(1)), "hkt": (topk.stride(1), topk.stride(0)),
                                 "shared": (topk.stride(0), 0)}[layout]
    assert c["topk"] == (topk.data_ptr(), token_stride, head_stride)
    assert c["o"] == (o.data_ptr(), o.stride(0), o.stride(1))
    assert c["topk_length"] == 0 and c["lse"] == 0
    assert c["workspace"] != 0 and c["workspace_bytes"] == 512


def test_each_call_zeroes_the_workspace_counters_only(fake, monkeypatch):
    # The workspace is sized for the plan's max_batch: zero-filling all of it per call cost more than the
    # attention. Only the counters it starts with must be zero; the rest is the call's scratch.
    filled = []
    zeros = torch.zeros
    monkeypatch.setattr(torch, "zeros", lambda *a, **k: filled.append(a) or zeros(*a, **k))
    pool = torch.full((512,), 0xAB, dtype=torch.uint8)  # what the allocator hands back: a dirty block
    monkeypatch.setattr(torch, "empty", lambda *a, **k: pool if a == (512,) else torch.ones(*a, **k))
    for _ in range(2):
        kvcache.kvcache_attention(**problem())
    assert fake.counters == [bytes(256)] * 2  # the counters zero when each call starts
    assert pool[256:].eq(0xAB).all()  # the scratch untouched
    assert not any(a == (512,) for a in filled)


def test_lengths_lse_and_a_value_head_dim_of_its_own_reach_the_library(fake):
    p = problem(D=192, Dv=128, lengths=True)
    o, lse = kvcache.kvcache_attention(**p, return_lse=True, scale=0.25, splits=3)
    (c,) = fake.calls
    assert o.shape == (4, 8, 128) and lse.shape == (8, 4) and lse.dtype == torch.float32
    assert c["topk_length"] == p["topk_length"].data_ptr() and c["lse"] == lse.data_ptr()
    assert c["o"] == (o.data_ptr(), o.stride(0), o.stride(1))
    # The plan's key: device, dtype, D, Hq, Hkv, BK, K, page, max batch, max tokens, scale, splits, check, Dv.
    assert fake.plans == [(0, torch.bfloat16, 192, 8, 2, 16, 4, 16, 2, 4, 0.25, 3, False, 128)]


def test_the_plan_is_sized_for_the_given_bounds_or_the_call_rounded_up(fake):
    kvcache.kvcache_attention(**problem())
    kvcache.kvcache_attention(**problem(), max_batch=64, max_query_tokens=1000, validate=True)
    assert [key[8:10] for key in fake.plans] == [(2, 4), (64, 1000)]
    assert [key[12] for key in fake.plans] == [False, True]


def test_a_plain_eager_call_skips_the_operator(fake, monkeypatch):
    def through_the_operator(*args):
        raise AssertionError("a plain eager call went through the dispatcher")

    monkeypatch.setattr(kvcache, "_OP", through_the_operator)
    kvcache.kvcache_attention(**problem())
    assert len(fake.calls) == 1


@pytest.mark.parametrize("name", ["q", "k_cache", "v_cache", "block_table", "topk_idx"])
def test_a_view_with_the_negative_bit_goes_through_the_operator(fake, monkeypatch, name):
    # Its memory holds the values unnegated, which the plain call would hand to libfsa; the operator resolves it.
    reached = []
    monkeypatch.setattr(kvcache, "_OP", lambda *args: reached.append(args[:8]) or (None, None))
    p = problem()
    p[name] = torch._neg_view(-p[name])
    kvcache.kvcache_attention(**p)
    assert len(reached) == 1 and not fake.calls


@pytest.mark.parametrize("name", ["q", "k_cache", "v_cache"])
def test_an_input_that_requires_grad_gets_an_output_whose_backward_says_there_is_none(fake, name):
    """Forward only: the plain eager call used to hand back an output detached from q (requires_grad False),
    so a loss through it trained with no gradient for q and no error; the operator's output has a node whose
    backward raises, as under torch.compile or fake tensors."""
    p = problem()
    p[name].requires_grad_()
    o = kvcache.kvcache_attention(**p)
    assert o.requires_grad and len(fake.calls) == 1
    with pytest.raises(RuntimeError, match=r"kvcache_attention.*no autograd formula"):
        o.float().sum().backward()


def test_without_grad_mode_an_input_that_requires_grad_takes_the_plain_eager_call(fake, monkeypatch):
    def through_the_operator(*args):
        raise AssertionError("a call without grad mode went through the dispatcher")

    monkeypatch.setattr(kvcache, "_OP", through_the_operator)
    p = problem()
    p["q"].requires_grad_()
    with torch.no_grad():
        assert not kvcache.kvcache_attention(**p).requires_grad
    assert len(fake.calls) == 1


def test_the_gpu_tests_poison_reaches_the_outputs_the_library_is_handed(fake, poisoned_outputs):
    """conftest's poisoned_outputs (the GPU tests' guard against rows a kernel skips): a library that writes
    nothing leaves NaN in o and lse, not the caching allocator's leftovers."""
    o, lse = kvcache.kvcache_attention(**problem(), return_lse=True)
    (c,) = fake.calls
    assert c["o"][0] == o.data_ptr() and c["lse"] == lse.data_ptr()
    assert torch.isnan(o).all() and torch.isnan(lse).all()
    assert poisoned_outputs == [(torch.bfloat16, (4, 8, 64)), (torch.float32, (8, 4))]


# The operator, checked without a GPU: its registration, fake (meta) outputs and a fullgraph
# torch.compile capture with fake CUDA tensors, none of which may reach libfsa.
needs_custom_op = pytest.mark.skipif(not hasattr(torch.library, "custom_op"), reason="torch.library.custom_op: 2.4")


@pytest.fixture
def no_library(monkeypatch):
    def reached(*args, **kwargs):
        raise AssertionError("tracing reached libfsa")

    monkeypatch.setattr(_lib, "get", reached)
    monkeypatch.setattr(kvcache, "_plan", reached)


def fake_problem(mode, layout="thk", Dv=None):
    with mode:
        p = problem(layout, D=64, Dv=Dv, lengths=True)
        return {name: (value.to("cuda") if isinstance(value, torch.Tensor) else value) for name, value in p.items()}


@needs_custom_op
def test_the_operator_is_registered_with_a_fake_implementation():
    assert hasattr(torch.ops.fsa_jit, "kvcache_attention")
    assert torch._C._dispatch_has_kernel_for_dispatch_key("fsa_jit::kvcache_attention", "Meta")


@needs_custom_op
@pytest.mark.parametrize("return_lse", [False, True])
def test_fake_tensors_give_the_output_shapes(no_library, return_lse):
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    p = fake_problem(mode, layout="hkt", Dv=128)
    with mode:
        out = kvcache.kvcache_attention(**p, return_lse=return_lse)
    o, lse = out if return_lse else (out, None)
    assert o.shape == (4, 8, 128) and o.dtype == torch.bfloat16 and o.device.type == "cuda"
    if return_lse:
        assert lse.shape == (8, 4) and lse.dtype == torch.float32


@needs_custom_op
def test_fullgraph_compile_captures_one_operator_call(no_library):
    from torch._subclasses.fake_tensor import FakeTensorMode

    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def f(q, k_cache, v_cache, cu, seqused, table, topk, lengths):
        return kvcache.kvcache_attention(q, k_cache, v_cache, cu, seqused, table, topk, 16, topk_length=lengths,
                                         scale=0.5, return_lse=True, max_batch=8, splits=2)

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, backend=capture)
    mode = FakeTensorMode()
    p = fake_problem(mode)
    with mode:
        o, lse = compiled(p["q"], p["k_cache"], p["v_cache"], p["cu_seqlens_q"], p["seqused_k"], p["block_table"],
                          p["topk_idx"], p["topk_length"])
    assert o.shape == (4, 8, 64) and lse.shape == (8, 4)
    assert len(graphs) == 1
    calls = [n for n in graphs[0].graph.nodes if n.op == "call_function" and "fsa_jit" in str(n.target)]
    assert len(calls) == 1 and "kvcache_attention" in str(calls[0].target)
    # block size, layout, scale, return_lse, max batch, max tokens, splits, validate
    assert tuple(calls[0].args[8:]) == (16, "thk", 0.5, True, 8, 0, 2, False)


def test_set_tuning_reaches_the_paged_cache_plans_made_after_it(monkeypatch):
    from fsa_jit import attention

    contexts = []

    def context(lib, device, validate, tune):
        contexts.append((device, validate, tune))
        return 100 + len(contexts)

    def create(handle, ctx, desc):
        handle._obj.value = 5000 + ctx
        return 0

    def workspace_size(size, handle):
        size._obj.value = 256
        return 0

    def counter_size(size, handle):
        size._obj.value = 32
        return 0

    functions = {"fsa_kvcache_plan_create": create, "fsa_kvcache_plan_workspace_size": workspace_size,
                 "fsa_kvcache_plan_workspace_counter_size": counter_size}
    monkeypatch.setattr(attention, "_tune", None)  # restored after the test
    monkeypatch.setattr(attention, "_context", context)
    monkeypatch.setattr(kvcache, "_plans", {})
    monkeypatch.setattr(kvcache, "_fn", lambda library, name: functions[name])
    shape = (0, torch.bfloat16, 128, 32, 8, 64, 16, 64, 4, 4, 0.0, 0, False, 128)
    lib = FakeLibrary()

    attention.set_tuning("on")
    on = kvcache._plan(lib, shape)
    assert kvcache._plan(lib, shape) == on  # cached for the mode
    attention.set_tuning("off")
    off = kvcache._plan(lib, shape)

    assert contexts == [(0, False, "on"), (0, False, "off")]
    assert on == (5101, 256, 32) and off == (5102, 256, 32)


def _plan_functions(monkeypatch, functions):
    from fsa_jit import attention

    monkeypatch.setattr(attention, "_context", lambda lib, device, validate, tune: 100)
    monkeypatch.setattr(kvcache, "_plans", {})

    def fn(library, name):
        if name not in functions:
            raise RuntimeError(f"fake has no {name}")
        return functions[name]

    monkeypatch.setattr(kvcache, "_fn", fn)
    return (0, torch.bfloat16, 128, 32, 8, 64, 16, 64, 4, 4, 0.0, 0, False, 128)


def test_a_libfsa_without_the_counter_size_gets_its_whole_workspace_zeroed(monkeypatch):
    def create(handle, ctx, desc):
        handle._obj.value = 5000
        return 0

    def workspace_size(size, handle):
        size._obj.value = 4096
        return 0

    shape = _plan_functions(monkeypatch, {"fsa_kvcache_plan_create": create,
                                          "fsa_kvcache_plan_workspace_size": workspace_size})
    assert kvcache._plan(FakeLibrary(), shape) == (5000, 4096, 4096)


def test_a_plan_whose_sizes_cannot_be_read_is_destroyed_not_leaked(monkeypatch):
    destroyed = []

    def create(handle, ctx, desc):
        handle._obj.value = 5000
        return 0

    shape = _plan_functions(monkeypatch, {"fsa_kvcache_plan_create": create,
                                          "fsa_kvcache_plan_workspace_size": lambda size, handle: 7,
                                          "fsa_kvcache_plan_destroy": destroyed.append})
    with pytest.raises(_lib.FsaError):
        kvcache._plan(FakeLibrary(), shape)
    assert destroyed == [5000] and kvcache._plans == {}
