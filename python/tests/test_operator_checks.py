"""The operators called straight (torch.ops.fsa_jit.*), without a public function's checks in front: bad
metadata gets the public function's error (its type and message) instead of reaching libfsa, from the
fake implementations (fake CUDA tensors, as torch.compile traces) and from the operators' own bodies (CPU
tensors: their device check comes last). Good direct calls still trace. Runs without a GPU."""

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("torch.library.custom_op needs torch 2.4", allow_module_level=True)

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import fsa_jit  # noqa: E402
from fsa_jit import _lib, attention, compressed, kvcache, nsa, window  # noqa: E402, F401 (nsa: the gate operators)

ops = torch.ops.fsa_jit


@pytest.fixture(autouse=True)
def no_library(monkeypatch):
    """No check may let a call through to libfsa or a plan, and no trace may reach them."""

    def reached(*args, **kwargs):
        raise AssertionError("a direct operator call reached libfsa")

    monkeypatch.setattr(_lib, "get", reached)
    for module in (attention, compressed, window):
        monkeypatch.setattr(module, "_get_plan", reached)
    monkeypatch.setattr(kvcache, "_plan", reached)


@pytest.fixture
def fake():
    """The test runs under a FakeTensorMode: tensors made on "cuda" are fake CUDA tensors."""
    with FakeTensorMode():
        yield


def floats(*shape, dtype=torch.bfloat16, device="cuda"):
    return torch.zeros(shape, dtype=dtype, device=device)


def ints(*shape, dtype=torch.int32, device="cuda"):
    return torch.zeros(shape, dtype=dtype, device=device)


def offsets(*values, dtype=torch.int32, device="cuda"):
    return torch.tensor(values, dtype=dtype, device=device)


def refused(op, error, match, **args):
    with pytest.raises(error, match=match):
        getattr(ops, op)(**args)


# The operators' arguments as the public functions pass them (T = 10 query tokens unless said).


def selected(T=10, Hq=4, Hkv=2, D=32, Dv=None, K=3, device="cuda", **change):
    return dict(q=floats(T, Hq, D, device=device), k=floats(T, Hkv, D, device=device),
                v=floats(T, Hkv, Dv or D, device=device), topk_idx=ints(T, Hkv, K, device=device),
                cu_seqlens=offsets(0, 4, T, device=device), block_size=16, scale=0.0, max_seqlen=0, algorithm=0,
                topk_layout="thk", workspace_limit=0, backward=False) | change


def selected_bwd(T=10, Hq=4, Hkv=2, D=32, Dv=None, device="cuda", **change):
    p = selected(T, Hq, Hkv, D, Dv, device=device)
    del p["backward"]
    return p | dict(dout=floats(T, Hq, Dv or D, device=device), o=floats(T, Hq, Dv or D, device=device),
                    lse=floats(Hq, T, dtype=torch.float32, device=device)) | change


def compressed_args(T=10, Tc=3, Hq=4, Hkv=2, Dk=32, Dv=16, device="cuda", **change):
    return dict(q=floats(T, Hq, Dk, device=device), k=floats(Tc, Hkv, Dk, device=device),
                v=floats(Tc, Hkv, Dv, device=device), cu_seqlens=offsets(0, 4, T, device=device),
                cu_seqlens_c=offsets(0, 0, Tc, device=device), kernel_size=4, stride=2, scale=0.0, top_k=4,
                block_size=16, init_blocks=1, local_blocks=2, backward=False, validate=False) | change


def compressed_bwd(T=10, Hq=4, Dv=16, **change):
    p = compressed_args(T=T, Hq=Hq, Dv=Dv)
    del p["backward"]
    return p | dict(dout=floats(T, Hq, Dv), o=floats(T, Hq, Dv), lse=floats(Hq, T, dtype=torch.float32)) | change


def window_args(T=10, Hq=4, Hkv=2, Dk=32, Dv=16, device="cuda", **change):
    return dict(q=floats(T, Hq, Dk, device=device), k=floats(T, Hkv, Dk, device=device),
                v=floats(T, Hkv, Dv, device=device), cu_seqlens=offsets(0, 4, T, device=device), window=4,
                head_windows=[], scale=0.0, backward=False, validate=False) | change


def window_bwd(T=10, Hq=4, Dv=16, **change):
    p = window_args(T=T, Hq=Hq, Dv=Dv)
    del p["backward"]
    return p | dict(dout=floats(T, Hq, Dv), o=floats(T, Hq, Dv), lse=floats(Hq, T, dtype=torch.float32)) | change


def kvcache_args(device="cuda", **change):
    """Two sequences (1 and 2 new tokens) over six pages of 16 keys."""
    return dict(q=floats(3, 4, 64, device=device), k_cache=floats(6, 16, 2, 64, device=device),
                v_cache=floats(6, 16, 2, 64, device=device), cu_seqlens_q=offsets(0, 1, 3, device=device),
                seqused_k=offsets(20, 30, device=device), block_table=ints(2, 3, device=device),
                topk_idx=ints(3, 2, 4, device=device), topk_length=None, block_size=16, topk_layout="thk",
                scale=0.0, return_lse=False, max_batch=0, max_query_tokens=0, splits=0, validate=False) | change


def gate_args(T=10, Hq=4, Dv=32, device="cuda", **change):
    outs = {name: floats(T, Hq, Dv, device=device) for name in ("o_cmp", "o_sel", "o_win")}
    gates = {name: floats(T, Hq, dtype=torch.float32, device=device) for name in ("g_cmp", "g_sel", "g_win")}
    return outs | gates | change


# ------------------------------------------------------------- selected attention


def test_a_direct_forward_call_with_int64_topk_is_refused(fake):
    refused("selected_attention_fwd", TypeError, r"topk_idx must be torch.int32, got torch.int64",
            **selected(topk_idx=ints(10, 2, 3, dtype=torch.int64)))


def test_a_direct_forward_call_with_k_and_v_shorter_than_q_is_refused(fake):
    refused("selected_attention_fwd", ValueError, r"q has T=10 tokens but k and v have 8",
            **selected(k=floats(8, 2, 32), v=floats(8, 2, 32)))


@pytest.mark.parametrize("device,match", [("cpu", r"cu_seqlens must be a CUDA tensor"),
                                          ("cuda:1", r"cu_seqlens is on cuda:1 but q is on cuda:0")])
def test_a_direct_forward_call_with_cu_seqlens_on_another_device_is_refused(fake, device, match):
    refused("selected_attention_fwd", ValueError, match, **selected(cu_seqlens=offsets(0, 4, 10, device=device)))


@pytest.mark.parametrize("name,shape", [("k", (10, 2, 32)), ("v", (10, 2, 32)), ("topk_idx", (10, 2, 3))])
def test_a_direct_forward_call_with_k_v_or_topk_on_another_gpu_is_refused(fake, name, shape):
    # libfsa would dereference another device's pointer in q's kernel.
    make = ints if name == "topk_idx" else floats
    refused("selected_attention_fwd", ValueError, rf"{name} is on cuda:1 but q is on cuda:0",
            **selected(**{name: make(*shape, device="cuda:1")}))


@pytest.mark.parametrize("change,match", [
    (lambda: dict(q=floats(10, 4, 32, dtype=torch.float32)), r"q must be torch.float16 or torch.bfloat16"),
    (lambda: dict(v=floats(10, 2, 32, dtype=torch.float16)), r"q, k and v must have the same dtype"),
    (lambda: dict(cu_seqlens=offsets(0, 4, 10, dtype=torch.int64)), r"cu_seqlens must be torch.int32"),
])
def test_a_direct_forward_call_with_a_wrong_dtype_is_refused(fake, change, match):
    refused("selected_attention_fwd", TypeError, match, **selected(**change()))


@pytest.mark.parametrize("change,match", [
    (lambda: dict(q=floats(10, 128)), r"q must be 3-D \[T, heads, head_dim\]"),
    (lambda: dict(topk_idx=ints(10, 6)), r"topk_idx must be 3-D"),
    (lambda: dict(cu_seqlens=ints(1, 3)), r"cu_seqlens must be 1-D \[batch \+ 1\]"),
])
def test_a_direct_forward_call_with_a_tensor_of_the_wrong_rank_is_refused(fake, change, match):
    refused("selected_attention_fwd", ValueError, match, **selected(**change()))


@pytest.mark.parametrize("change,match", [
    (lambda: dict(topk_layout="hkt"), r"topk_idx has shape \(10, 2, 3\), but topk_layout='hkt' with Hkv=2 and T=10"),
    (lambda: dict(topk_layout="kht"), r"topk_layout must be 'hkt'"),
    (lambda: dict(q=floats(10, 3, 32)), r"query heads \(3\) must be a multiple of the number of KV heads \(2\)"),
    (lambda: dict(k=floats(10, 2, 64)), r"q has head_dim 32 but k has 64"),
])
def test_a_direct_forward_call_whose_shapes_disagree_is_refused(fake, change, match):
    refused("selected_attention_fwd", ValueError, match, **selected(**change()))


@pytest.mark.parametrize("change,match", [
    (dict(block_size=48), r"block_size must be one of \(16, 32, 64, 128, 256\), got 48"),
    (dict(K=65), r"top-k \(last dim of topk_idx\) must be 1..64, got 65"),
    (dict(algorithm=3), r"algorithm must be an FSA_ALGORITHM_\* code: 0 \(auto\), 1 \(fsa\) or 2 \(nsa\), got 3"),
    (dict(scale=-1.0), r"scale must be a positive finite number"),
    (dict(max_seqlen=11), r"max_seqlen must be in 0..T = 0..10, got 11"),
    (dict(workspace_limit=-2), r"workspace_limit must not be negative, got -2"),
])
def test_a_direct_forward_call_with_a_parameter_out_of_range_is_refused(fake, change, match):
    refused("selected_attention_fwd", ValueError, match, **selected(**change))


def test_a_direct_backward_call_checks_the_forwards_arguments_too(fake):
    refused("selected_attention_bwd", TypeError, r"topk_idx must be torch.int32, got torch.int64",
            **selected_bwd(topk_idx=ints(10, 2, 3, dtype=torch.int64)))


@pytest.mark.parametrize("change,error,match", [
    (lambda: dict(lse=floats(4, 10, dtype=torch.float16)), TypeError, r"lse must be torch.float32, got torch.float16"),
    (lambda: dict(lse=floats(10, 4, dtype=torch.float32)), ValueError, r"lse must be \[Hq, T\] = \[4, 10\]"),
    (lambda: dict(dout=floats(10, 4, 16)), ValueError, r"dout must be \[T, Hq, Dv\] = \[10, 4, 32\]"),
    (lambda: dict(o=floats(10, 4, 32, dtype=torch.float16)), TypeError, r"o must have q's dtype torch.bfloat16"),
    (lambda: dict(o=floats(10, 4, 32, device="cuda:1")), ValueError, r"o is on cuda:1 but q is on cuda:0"),
])
def test_a_direct_backward_call_with_a_bad_o_lse_or_dout_is_refused(fake, change, error, match):
    refused("selected_attention_bwd", error, match, **selected_bwd(**change()))


def test_wide_head_dims_not_multiples_of_32_are_refused_wherever_the_backward_is_needed(fake):
    match = r"head dims 240 \(q, k\) and 96 \(v\): when together over 320, both must be multiples of 32"
    refused("selected_attention_bwd", ValueError, match, **selected_bwd(D=240, Dv=96))
    refused("selected_attention_fwd", ValueError, match, **selected(D=240, Dv=96, backward=True))
    o, lse = ops.selected_attention_fwd(**selected(D=240, Dv=96))  # a forward-only plan: fine
    assert o.shape == (10, 4, 96)


def test_the_check_function_refuses_what_is_not_a_tensor():
    p = selected(device="cpu", q=[[0.0]])
    with pytest.raises(TypeError, match=r"q must be a torch.Tensor, got list"):
        attention.check_operator(**p)


# ------------------------------------------------------------ compressed attention


def test_a_direct_compressed_call_with_int64_offsets_is_refused(fake):
    refused("compressed_attention_fwd", TypeError, r"cu_seqlens_c must be torch.int32, got torch.int64",
            **compressed_args(cu_seqlens_c=offsets(0, 0, 3, dtype=torch.int64)))


@pytest.mark.parametrize("change,match", [
    (lambda: dict(cu_seqlens_c=offsets(0, 3)), r"cu_seqlens_c must have one entry per entry of cu_seqlens \(3\)"),
    (lambda: dict(v=floats(4, 2, 16)), r"k and v must have the same \[Tc, Hkv\]"),
    (lambda: dict(k=floats(3, 2, 16)), r"q has head_dim 32 but k has 16"),
    (lambda: dict(q=floats(10, 34, 32)), r"group size 17 \(Hq 34 / Hkv 2\) is not supported"),
])
def test_a_direct_compressed_call_whose_shapes_disagree_is_refused(fake, change, match):
    refused("compressed_attention_fwd", ValueError, match, **compressed_args(**change()))


@pytest.mark.parametrize("change,match", [
    (dict(stride=5), r"stride must be 1..4, got 5"),
    (dict(top_k=65), r"top_k must be 0..64, got 65"),
    (dict(block_size=24), r"block_size 24 must be a multiple of stride 2 with block_size / stride a power of two"),
    (dict(init_blocks=-1), r"init_blocks must be >= 0"),
    (dict(scale=float("nan")), r"scale must be a positive finite number"),
])
def test_a_direct_compressed_call_with_a_parameter_out_of_range_is_refused(fake, change, match):
    refused("compressed_attention_fwd", ValueError, match, **compressed_args(**change))


def test_a_direct_compressed_call_with_offsets_on_the_host_is_refused(fake):
    refused("compressed_attention_fwd", ValueError, r"cu_seqlens must be a CUDA tensor",
            **compressed_args(cu_seqlens=offsets(0, 4, 10, device="cpu")))


def test_a_direct_compressed_backward_call_with_a_bad_lse_is_refused(fake):
    refused("compressed_attention_bwd", ValueError, r"lse must be \[Hq, T\] = \[4, 10\], got shape \(4, 11\)",
            **compressed_bwd(lse=floats(4, 11, dtype=torch.float32)))


# ------------------------------------------------------------------ window attention


def test_a_direct_window_call_with_a_window_too_few_per_head_is_refused(fake):
    # The plan's per-head array is made Hq long: three windows for four heads would leave one unset.
    refused("window_attention_fwd", ValueError, r"per-head windows: one per query head \(4\), got 3",
            **window_args(window=0, head_windows=[4, 4, 4]))


@pytest.mark.parametrize("change,match", [
    (dict(window=0), r"window must be 1..2147483647, got 0"),
    (dict(window=0, head_windows=[4, 0, 4, 4]), r"window\[1\] must be 1..2147483647, got 0"),
    (dict(window=4, head_windows=[4, 4, 4, 4]), r"window must be 0 when head_windows gives one window per query head"),
    (dict(scale=-0.5), r"scale must be a positive finite number"),
])
def test_a_direct_window_call_with_a_bad_window_or_scale_is_refused(fake, change, match):
    refused("window_attention_fwd", ValueError, match, **window_args(**change))


def test_a_direct_window_call_with_k_and_v_shorter_than_q_is_refused(fake):
    refused("window_attention_fwd", ValueError, r"q has T=10 tokens but k and v have 9",
            **window_args(k=floats(9, 2, 32), v=floats(9, 2, 16)))


def test_a_direct_window_call_with_int64_offsets_is_refused(fake):
    refused("window_attention_fwd", TypeError, r"cu_seqlens must be torch.int32, got torch.int64",
            **window_args(cu_seqlens=offsets(0, 4, 10, dtype=torch.int64)))


def test_a_direct_window_backward_call_with_dout_of_another_dtype_is_refused(fake):
    refused("window_attention_bwd", TypeError, r"dout must have q's dtype torch.bfloat16, got torch.float16",
            **window_bwd(dout=floats(10, 4, 16, dtype=torch.float16)))


# ------------------------------------------------------------------- paged KV cache


def test_a_direct_kvcache_call_with_int64_topk_is_refused(fake):
    refused("kvcache_attention", TypeError, r"topk_idx must be torch.int32, got torch.int64",
            **kvcache_args(topk_idx=ints(3, 2, 4, dtype=torch.int64)))


@pytest.mark.parametrize("name", ["cu_seqlens_q", "seqused_k", "block_table"])
def test_a_direct_kvcache_call_with_metadata_on_the_host_is_refused(fake, name):
    p = kvcache_args()
    p[name] = p[name].to("cpu")
    refused("kvcache_attention", ValueError, rf"{name} is on cpu but q is on cuda:0", **p)


@pytest.mark.parametrize("change,match", [
    (lambda: dict(block_table=ints(3, 3)), r"block_table must be \[B, max_pages\] with B = 2 \(from cu_seqlens_q\), "
                                           r"got shape \(3, 3\)"),
    (lambda: dict(seqused_k=offsets(20, 30, 40)), r"seqused_k must be \[B\] = \[2\] \(B from cu_seqlens_q\), got "
                                                  r"shape \(3,\)"),
    (lambda: dict(v_cache=floats(5, 16, 2, 64)), r"with the same pages and heads"),
    (lambda: dict(topk_idx=ints(2, 2, 4)), r"topk_idx must be \[Tq, Hkv, K\] = \[3, 2, K\]"),
    (lambda: dict(topk_length=ints(2)), r"topk_length must be \[Tq\] = \[3\] contiguous, got shape \(2,\)"),
    (lambda: dict(topk_length=ints(1, 3)), r"topk_length must be \[Tq\] = \[3\] contiguous, got shape \(1, 3\)"),
    (lambda: dict(cu_seqlens_q=ints(0)), r"cu_seqlens_q must be 1-D \[B \+ 1\]"),
])
def test_a_direct_kvcache_call_whose_shapes_disagree_is_refused(fake, change, match):
    refused("kvcache_attention", ValueError, match, **kvcache_args(**change()))


@pytest.mark.parametrize("change,match", [
    (lambda: dict(seqused_k=offsets(20, 0, 30, 0)[::2]), r"seqused_k must be contiguous"),
    (lambda: dict(topk_idx=ints(3, 2, 8)[..., ::2]), r"topk_idx's last dimension must be contiguous"),
    (lambda: dict(k_cache=floats(6, 16, 2, 128)[..., ::2]), r"k_cache's last dimension must be contiguous"),
    (lambda: dict(block_table=ints(2, 6)[:, ::2]), r"block_table's pages must be contiguous in a row"),
])
def test_a_direct_kvcache_call_with_strides_libfsa_cannot_read_in_place_is_refused(fake, change, match):
    refused("kvcache_attention", ValueError, match, **kvcache_args(**change()))


@pytest.mark.parametrize("change,match", [
    (dict(topk_layout="kht"), r"topk_layout must be 'thk' or 'hkt', got 'kht'"),
    (dict(block_size=0), r"block_size must be >= 1, got 0"),
    (dict(splits=-1), r"splits must be >= 0, got -1"),
    (dict(max_query_tokens=2**31), r"max_query_tokens 2147483648 is past int32"),
    (dict(scale=-1.0), r"scale must be a positive finite number"),
])
def test_a_direct_kvcache_call_with_a_parameter_out_of_range_is_refused(fake, change, match):
    refused("kvcache_attention", ValueError, match, **kvcache_args(**change))


@pytest.mark.parametrize("change,match", [
    # fsa_kvcache_args.max_pages_per_seq is an int: ctypes kept the low 32 bits, 2^32 + 1 pages became 1
    # (every later page of a sequence clamped to its first), with no error.
    (lambda: dict(block_table=ints(2, 2**32 + 1)), r"block_table has 4294967297 pages per sequence: at most"),
    # fsa_kvcache_args.batch is an int too (max_batch given: the plan would take the wrapped batch 1).
    (lambda: dict(cu_seqlens_q=ints(2**32 + 2), seqused_k=ints(2**32 + 1), block_table=ints(2**32 + 1, 3),
                  max_batch=4), r"cu_seqlens_q describes 4294967297 sequences: at most"),
])
def test_kvcache_sizes_that_libfsas_int_fields_cannot_hold_are_refused(fake, change, match):
    refused("kvcache_attention", ValueError, match, **kvcache_args(**change()))
    public = kvcache_args(**change()) | dict(scale=None, max_query_tokens=None)
    with pytest.raises(ValueError, match=match):
        kvcache.kvcache_attention(**public)


def test_a_direct_kvcache_call_with_caches_on_another_device_is_refused(fake):
    refused("kvcache_attention", ValueError, r"k_cache is on cuda:1 but q is on cuda:0",
            **kvcache_args(k_cache=floats(6, 16, 2, 64, device="cuda:1")))


# --------------------------------------------------------------------------- gates


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_a_direct_gate_call_with_a_gate_not_in_float32_is_refused(fake, dtype):
    refused("nsa_gate_fwd", TypeError, rf"g_sel must be torch.float32 .*, got {dtype}",
            **gate_args(g_sel=floats(10, 4, dtype=dtype)))


@pytest.mark.parametrize("shape", [(10,), (10, 4, 1), (4, 10)])
def test_a_direct_gate_call_with_a_gate_not_of_one_value_per_row_is_refused(fake, shape):
    refused("nsa_gate_fwd", ValueError, r"g_win must be \[T, Hq\] = \[10, 4\]",
            **gate_args(g_win=floats(*shape, dtype=torch.float32)))


@pytest.mark.parametrize("change,error,match", [
    (lambda: dict(o_sel=floats(10, 4, 16)), ValueError, r"o_sel must have o_cmp's shape \(10, 4, 32\)"),
    (lambda: dict(o_win=floats(10, 4, 32, dtype=torch.float16)), TypeError, r"o_win must have o_cmp's dtype"),
    (lambda: dict(o_cmp=floats(10, 4, 32, dtype=torch.float32)), TypeError,
     r"o_cmp must be torch.float16 or torch.bfloat16"),
    (lambda: dict(o_cmp=floats(10, 128)), ValueError, r"o_cmp must be 3-D \[T, Hq, Dv\]"),
])
def test_a_direct_gate_call_with_branch_outputs_that_disagree_is_refused(fake, change, error, match):
    refused("nsa_gate_fwd", error, match, **gate_args(**change()))


@pytest.mark.parametrize("change,match", [
    (lambda: dict(g_cmp=floats(10, 4, dtype=torch.float32, device="cpu")), r"g_cmp must be a CUDA tensor"),
    (lambda: dict(o_sel=floats(10, 4, 32, device="cuda:1")), r"o_sel is on cuda:1 but o_cmp is on cuda:0"),
])
def test_a_direct_gate_call_on_two_devices_is_refused(fake, change, match):
    refused("nsa_gate_fwd", ValueError, match, **gate_args(**change()))


def test_a_direct_gate_backward_call_with_dout_of_another_shape_is_refused(fake):
    refused("nsa_gate_bwd", ValueError, r"dout must have o_cmp's shape \(10, 4, 32\), got \(10, 4, 16\)",
            dout=floats(10, 4, 16), **gate_args())


# --------------------------------------------------------- the operators' own bodies


@pytest.mark.parametrize("op,args,error,match", [
    ("selected_attention_fwd", lambda: selected(device="cpu", topk_idx=ints(10, 2, 3, dtype=torch.int64,
                                                                            device="cpu")),
     TypeError, r"topk_idx must be torch.int32"),
    ("selected_attention_bwd", lambda: selected_bwd(device="cpu"), ValueError, r"q must be a CUDA tensor"),
    ("compressed_attention_fwd", lambda: compressed_args(device="cpu", stride=7), ValueError, r"stride must be 1..4"),
    ("window_attention_fwd", lambda: window_args(device="cpu"), ValueError, r"q must be a CUDA tensor"),
    ("kvcache_attention", lambda: kvcache_args(device="cpu"), ValueError, r"q must be a CUDA tensor"),
    ("nsa_gate_fwd", lambda: gate_args(device="cpu"), ValueError, r"o_cmp must be a CUDA tensor"),
])
def test_the_operators_own_bodies_check_as_their_fake_implementations_do(op, args, error, match):
    # Real CPU tensors run the operators' bodies, not their fakes; every check but the device's comes first.
    refused(op, error, match, **args())


# ------------------------------------------------------------ good calls still trace


def test_good_direct_calls_of_every_operator_still_trace(fake):
    o, lse = ops.selected_attention_fwd(**selected(Dv=64, topk_layout="thk", max_seqlen=10, algorithm=2,
                                                   workspace_limit=-1, scale=0.125))
    assert o.shape == (10, 4, 64) and lse.shape == (4, 10)
    dq, dk, dv = ops.selected_attention_bwd(**selected_bwd(Dv=64))
    assert (dq.shape, dk.shape, dv.shape) == ((10, 4, 32), (10, 2, 32), (10, 2, 64))
    o, lse, topk = ops.compressed_attention_fwd(**compressed_args())
    assert o.shape == (10, 4, 16) and topk.shape == (10, 2, 4)
    assert ops.compressed_attention_bwd(**compressed_bwd())[2].shape == (3, 2, 16)
    o, lse = ops.window_attention_fwd(**window_args(window=0, head_windows=[1, 2, 3, 4]))
    assert o.shape == (10, 4, 16)
    assert ops.window_attention_bwd(**window_bwd())[0].shape == (10, 4, 32)
    o, lse = ops.kvcache_attention(**kvcache_args(topk_idx=ints(3, 4), topk_length=ints(3), return_lse=True))
    assert o.shape == (3, 4, 64) and lse.shape == (4, 3)
    g = floats(1, 4, dtype=torch.float32).expand(10, 4)  # a broadcast gate: zero strides are fine
    assert ops.nsa_gate_fwd(**gate_args(g_win=g)).shape == (10, 4, 32)
    assert ops.nsa_gate_bwd(dout=floats(10, 4, 32), **gate_args())[3].shape == (3, 10, 4)


def compile_capturing(fn, graphs):
    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    return torch.compile(fn, backend=backend, fullgraph=True)


def test_a_compiled_direct_call_with_int64_topk_fails_while_tracing(fake):
    def forward(p):
        return ops.selected_attention_fwd(**p)

    graphs = []
    compiled = compile_capturing(forward, graphs)
    with pytest.raises(Exception, match=r"TypeError\('topk_idx must be torch.int32, got torch.int64"):
        compiled(selected(topk_idx=ints(10, 2, 3, dtype=torch.int64)))
    o, _ = compiled(selected())
    assert o.shape == (10, 4, 32) and len(graphs) == 1


def test_compiled_calls_whose_ints_vary_still_trace(fake):
    # torch.compile makes an int that changes between calls symbolic: the fake implementations check its
    # example value (without a guard) rather than refusing a torch.SymInt as not an int.
    def forward(q, k, v, topk_idx, cu_seqlens, block_size, max_seqlen, window):
        o = fsa_jit.selected_attention(q, k, v, topk_idx, cu_seqlens, block_size, max_seqlen=max_seqlen)
        return o + fsa_jit.window_attention(q, k, v, cu_seqlens, window)

    graphs = []
    compiled = compile_capturing(forward, graphs)
    p = selected()
    tensors = [p[n] for n in ("q", "k", "v", "topk_idx", "cu_seqlens")]
    for block_size, max_seqlen, window in ((16, 4, 3), (32, 5, 4), (64, 6, 5)):
        assert compiled(*tensors, block_size, max_seqlen, window).shape == (10, 4, 32)
    assert len(graphs) >= 2


def test_compiled_calls_whose_scale_varies_still_trace(fake):
    # A float that changes between calls becomes a symbolic float: the scale check must trace through it
    # (math.isfinite on it cannot go into a full graph).
    def forward(q, k, v, topk_idx, cu_seqlens, scale):
        o = fsa_jit.selected_attention(q, k, v, topk_idx, cu_seqlens, 16, max_seqlen=4, scale=scale)
        return o + fsa_jit.window_attention(q, k, v, cu_seqlens, 3, scale=scale)

    graphs = []
    compiled = compile_capturing(forward, graphs)
    p = selected()
    tensors = [p[n] for n in ("q", "k", "v", "topk_idx", "cu_seqlens")]
    for scale in (0.5, 0.25, 0.125):
        assert compiled(*tensors, scale).shape == (10, 4, 32)
    assert len(graphs) >= 2


@pytest.mark.parametrize("name", ["lse", "dout"])
def test_a_direct_backward_call_with_lse_or_dout_on_another_gpu_is_refused(fake, name):
    p = selected_bwd()
    p[name] = torch.zeros(p[name].shape, dtype=p[name].dtype, device="cuda:1")
    refused("selected_attention_bwd", ValueError, rf"{name} is on cuda:1 but q is on cuda:0", **p)


# ------------------------------------------------- more shape, device and limit checks


@pytest.mark.parametrize("change,match", [
    (lambda: dict(cu_seqlens_c=offsets(0, 0, 1, 3)), r"cu_seqlens_c must have one entry per entry of cu_seqlens \(3\), got 4"),
    (lambda: dict(v=floats(3, 1, 16)), r"k and v must have the same \[Tc, Hkv\]"),
    (lambda: dict(cu_seqlens=offsets(0), cu_seqlens_c=offsets(0)), r"cu_seqlens must be 1-D \[batch \+ 1\] with at least 2"),
])
def test_a_direct_compressed_call_with_more_offsets_or_kv_heads_that_disagree_is_refused(fake, change, match):
    refused("compressed_attention_fwd", ValueError, match, **compressed_args(**change()))


def test_a_direct_window_call_with_more_windows_than_query_heads_is_refused(fake):
    refused("window_attention_fwd", ValueError, r"per-head windows: one per query head \(4\), got 5",
            **window_args(window=0, head_windows=[4, 4, 4, 4, 4]))


def test_per_head_windows_for_more_than_256_query_heads_are_refused(fake):
    # libfsa's plan holds at most FSA_WINDOW_MAX_HEAD_WINDOWS (256) windows.
    refused("window_attention_fwd", ValueError, r"per-head windows take at most 256 query heads, got 257",
            **window_args(Hq=257, Hkv=257, window=0, head_windows=[4] * 257))


@pytest.mark.parametrize("change,match", [
    (lambda: dict(k=floats(11, 2, 32), v=floats(11, 2, 16)), r"q has T=10 tokens but k and v have 11"),
    (lambda: dict(v=floats(10, 1, 16)), r"k and v must have the same \[T, Hkv\]"),
])
def test_a_direct_window_call_with_longer_keys_or_kv_heads_that_disagree_is_refused(fake, change, match):
    refused("window_attention_fwd", ValueError, match, **window_args(**change()))


# ------------------------------------------------------------------- gate operators


@pytest.mark.parametrize("change,error,match", [
    (lambda: dict(o_sel=floats(10, 4, 16)), ValueError, r"o_sel must have o_cmp's shape \(10, 4, 32\)"),
    (lambda: dict(o_win=floats(10, 2, 32)), ValueError, r"o_win must have o_cmp's shape \(10, 4, 32\)"),
    (lambda: dict(g_cmp=floats(10, 4, dtype=torch.float16)), TypeError, r"g_cmp must be torch.float32"),
    (lambda: dict(g_sel=floats(4, 10, dtype=torch.float32)), ValueError, r"g_sel must be \[T, Hq\] = \[10, 4\]"),
    (lambda: dict(g_win=floats(10, 4, dtype=torch.float32, device="cuda:1")), ValueError,
     r"g_win is on cuda:1 but o_cmp is on cuda:0"),
])
def test_a_direct_gate_call_with_a_bad_output_or_gate_is_refused(fake, change, error, match):
    refused("nsa_gate_fwd", error, match, **gate_args(**change()))


@pytest.mark.parametrize("op", ["nsa_gate_fwd", "nsa_gate_bwd"])
@pytest.mark.parametrize("dv", [0, 24, 272])
def test_a_direct_gate_call_with_a_value_head_dim_libfsa_refuses_is_refused(fake, op, dv):
    extra = dict(dout=floats(10, 4, dv)) if op == "nsa_gate_bwd" else {}
    refused(op, ValueError, rf"o_cmp's value head dim {dv} is not supported", **extra, **gate_args(Dv=dv))
