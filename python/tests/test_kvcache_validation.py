"""kvcache_attention rejects bad arguments before any device or library call.

Runs on a CPU-only machine: every check except the device check comes before
it, so CPU tensors reach each of them."""

import pytest

torch = pytest.importorskip("torch")

from fsa_jit import _lib, kvcache  # noqa: E402
from helpers import on_meta  # noqa: E402


@pytest.fixture(autouse=True)
def no_library(monkeypatch):
    """Any use of libfsa fails the test."""

    def reached(*args, **kwargs):
        raise AssertionError("validation let a bad call through to libfsa")

    monkeypatch.setattr(_lib, "get", reached)


def problem(D=64, Dv=None, Hq=4, Hkv=2, page=16, pages=6, tq=3, k=4):
    """Two sequences (1 and 2 new tokens) over a small paged cache, on the CPU."""
    return dict(
        q=torch.randn(tq, Hq, D).to(torch.bfloat16),
        k_cache=torch.randn(pages, page, Hkv, D).to(torch.bfloat16),
        v_cache=torch.randn(pages, page, Hkv, Dv or D).to(torch.bfloat16),
        cu_seqlens_q=torch.tensor([0, 1, tq], dtype=torch.int32),
        seqused_k=torch.tensor([20, 30], dtype=torch.int32),
        block_table=torch.zeros(2, 3, dtype=torch.int32),
        topk_idx=torch.zeros(tq, Hkv, k, dtype=torch.int32),
        block_size=16,
    )


def expect(match, **call):
    with pytest.raises(ValueError, match=match):
        kvcache.kvcache_attention(**call)


def test_a_valid_cpu_call_fails_only_on_the_device():
    expect(r"q must be a CUDA tensor", **problem())


@pytest.mark.parametrize("what", ["q", "k_cache", "block_table", "topk_idx"])
def test_a_sparse_tensor_is_refused_as_not_dense(what):
    p = problem()
    p[what] = p[what].to_sparse()
    with pytest.raises(TypeError, match=rf"{what} must be a dense \(strided\) tensor"):
        kvcache.kvcache_attention(**p)


@pytest.mark.parametrize("dims", [(192, 128), (128, 64), (64, 128), (128, 256)])
def test_a_value_cache_of_its_own_head_dim_fails_only_on_the_device(dims):
    expect(r"q must be a CUDA tensor", **problem(D=dims[0], Dv=dims[1]))


@pytest.mark.parametrize("dk", [128, 32])
def test_q_and_the_key_cache_must_share_the_head_dim(dk):
    # libfsa reads D columns of each cached key: a narrower k_cache would be read past its rows.
    p = problem(D=64)
    p["k_cache"] = torch.randn(6, 16, 2, dk).to(torch.bfloat16)
    expect(rf"q and k_cache share the query/key head dim: q has 64, k_cache {dk}", **p)


def test_the_caches_must_have_the_same_pages_and_heads():
    p = problem(Dv=128)
    p["v_cache"] = torch.randn(6, 16, 1, 128).to(torch.bfloat16)
    expect(r"the same pages and heads", **p)


@pytest.mark.parametrize("Dv", [8, 24, 272])
def test_a_value_head_dim_outside_16_to_256_in_steps_of_16_is_refused(Dv):
    expect(rf"v_cache's head dim {Dv}", **problem(Dv=Dv))


def test_clear_plans_of_the_package_drops_the_paged_cache_plans_too(monkeypatch):
    import fsa_jit

    monkeypatch.setattr(_lib, "_library", None)  # nothing to destroy in a library: only the entries go
    monkeypatch.setitem(kvcache._plans, ("a paged-cache plan key",), (0x1234, 0, 0))
    fsa_jit.clear_plans()
    assert kvcache._plans == {}


def test_clear_plans_destroys_each_cached_paged_cache_plan(monkeypatch):
    destroyed = []
    monkeypatch.setattr(_lib, "_library", object())  # a loaded library: its plans are destroyed
    monkeypatch.setattr(kvcache, "_fn", lambda lib, name: {"fsa_kvcache_plan_destroy": destroyed.append}[name])
    monkeypatch.setattr(kvcache, "_plans", {("a",): (0x1234, 4096, 256), ("b",): (0x5678, 0, 0)})
    kvcache.clear_plans()
    assert sorted(destroyed) == [0x1234, 0x5678] and kvcache._plans == {}


def expect_error(error, match, **call):
    with pytest.raises(error, match=match):
        kvcache.kvcache_attention(**call)


@pytest.mark.parametrize("name,values", [("cu_seqlens_q", [0, 9, 1, 9, 3, 9]), ("seqused_k", [20, 0, 30, 0])])
def test_the_lengths_read_in_place_must_be_contiguous(name, values):
    # Passed by pointer, never copied (updated in place between graph replays): a strided view would be misread.
    expect(rf"{name} must be contiguous", **problem() | {name: torch.tensor(values, dtype=torch.int32)[::2]})


def test_the_block_table_needs_unit_column_stride_and_rows_that_do_not_overlap():
    table = torch.zeros(2, 6, dtype=torch.int32)
    expect(r"block_table's pages must be contiguous in a row \(column stride 1\), got stride 2",
           **problem() | {"block_table": table[:, ::2]})
    # One page per row: its column stride is never used.
    expect(r"q must be a CUDA tensor", **problem() | {"block_table": table[:, 1::2][:, :1]})
    expect(r"q must be a CUDA tensor", **problem() | {"block_table": table[:, :3]})  # rows 6 apart: fine
    for overlapping in (torch.zeros(1, 3, dtype=torch.int32).expand(2, 3), table.as_strided((2, 3), (2, 1))):
        expect(r"block_table's rows are \d entries apart but hold 3: rows must not overlap",
               **problem() | {"block_table": overlapping})
    one = problem(tq=1) | dict(cu_seqlens_q=torch.tensor([0, 1], dtype=torch.int32),
                               seqused_k=torch.tensor([20], dtype=torch.int32))
    expect(r"q must be a CUDA tensor", **one | {"block_table": torch.zeros(1, 3, dtype=torch.int32).expand(1, 3)})


@pytest.mark.parametrize("name", ["q", "k_cache", "v_cache"])
def test_what_libfsa_reads_in_place_needs_strides_in_multiples_of_8_elements(name):
    p = problem()
    wide = torch.randn(*p[name].shape[:-1], p[name].shape[-1] + 4).to(torch.bfloat16)
    expect(rf"{name}'s strides \(.*\) must be multiples of 8 elements", **p | {name: wide[..., :-4]})
    # The same strides in a dimension of one element matter to no address: accepted.
    if name == "q":
        one = problem(tq=1) | dict(cu_seqlens_q=torch.tensor([0, 1], dtype=torch.int32),
                                   seqused_k=torch.tensor([20], dtype=torch.int32),
                                   block_table=torch.zeros(1, 3, dtype=torch.int32))
        odd_token_stride = torch.randn(4 * 64).to(torch.bfloat16).as_strided((1, 4, 64), (3, 64, 1))
        expect(r"q must be a CUDA tensor", **one | {"q": odd_token_stride})


def test_the_pages_of_a_cache_must_be_distinct_memory():
    p = problem()
    for name in ("k_cache", "v_cache"):
        one_page = p[name][:1].expand(*p[name].shape)
        expect(rf"{name}'s pages are one memory \(page stride 0\)", **p | {name: one_page})


def test_an_empty_call_reads_no_tensor_so_their_strides_do_not_matter():
    none = dict(cu_seqlens_q=torch.zeros(1, dtype=torch.int32), seqused_k=torch.zeros(0, dtype=torch.int32),
                block_table=torch.zeros(0, 3, dtype=torch.int32))
    odd = torch.randn(6, 16, 2, 68).to(torch.bfloat16)[..., :64]
    expect(r"q must be a CUDA tensor", **problem(tq=0) | none | {"k_cache": odd})


@pytest.mark.parametrize("offset", [1, 4])  # 2 and 8 bytes past an aligned address
def test_q_and_the_caches_must_be_16_byte_aligned(offset):
    flat = torch.zeros(3 * 4 * 64 + 8, dtype=torch.bfloat16)
    q = flat[offset:offset + 3 * 4 * 64].view(3, 4, 64)
    p = problem()
    with pytest.raises(ValueError, match=r"q must be 16-byte aligned"):
        kvcache._check_aligned(q, p["k_cache"], p["v_cache"])
    kvcache._check_aligned(p["q"], p["k_cache"], p["v_cache"])  # torch's own allocations are


@pytest.mark.parametrize("cu", [torch.zeros(0, dtype=torch.int32), torch.tensor([[0, 1, 3]], dtype=torch.int32)])
def test_cu_seqlens_q_must_be_1d_with_an_entry_per_sequence_and_one(cu):
    expect(r"cu_seqlens_q must be 1-D \[B \+ 1\]", **problem() | {"cu_seqlens_q": cu})


def test_no_sequence_takes_no_query_tokens_and_is_an_empty_call_without_them():
    none = dict(cu_seqlens_q=torch.zeros(1, dtype=torch.int32), seqused_k=torch.zeros(0, dtype=torch.int32),
                block_table=torch.zeros(0, 3, dtype=torch.int32))
    expect(r"cu_seqlens_q describes no sequence \(B = 0\) but q has 3 tokens", **problem() | none)
    empty = problem(tq=0) | none
    expect(r"q must be a CUDA tensor", **empty)  # valid up to the device


@pytest.mark.parametrize("name", ["cu_seqlens_q", "seqused_k", "block_table", "topk_idx", "q", "k_cache"])
@pytest.mark.parametrize("value", [None, [0, 1, 3]])
def test_an_argument_that_is_not_a_tensor_is_a_type_error_naming_it(name, value):
    expect_error(TypeError, rf"{name} must be a torch.Tensor, got {type(value).__name__}", **problem() | {name: value})


def test_a_cache_without_kv_heads_is_refused():
    p = problem() | dict(k_cache=torch.randn(6, 16, 0, 64).bfloat16(), v_cache=torch.randn(6, 16, 0, 64).bfloat16(),
                         topk_idx=torch.zeros(3, 0, 4, dtype=torch.int32))
    expect(r"need at least one head: q has 4, k_cache and v_cache 0", **p)


@pytest.mark.parametrize("block_size", [16.7, 16.0, "16", None, True])
def test_block_size_must_be_an_int(block_size):
    expect_error(TypeError, r"block_size must be an int", **problem() | {"block_size": block_size})


@pytest.mark.parametrize("scale,error,match", [
    (0, ValueError, r"scale must be a positive finite number"),  # not the default: None is
    (-1.0, ValueError, r"scale must be a positive finite number"),
    (float("nan"), ValueError, r"scale must be a positive finite number"),
    (1e-46, ValueError, r"scale 1e-46 is 0 or infinite in float32"),
    (torch.tensor(0.5), TypeError, r"scale must be a float or None"),
])
def test_scale_must_be_positive_and_finite_in_float32_when_given(scale, error, match):
    expect_error(error, match, **problem() | {"scale": scale})


@pytest.mark.parametrize("shape", [(3,), (3, 2, 4, 1)])
def test_topk_idx_is_2d_or_3d(shape):
    expect(r"topk_idx must be \[Tq, Hkv, K\], \[Hkv, Tq, K\] or \[Tq, K\]",
           **problem() | {"topk_idx": torch.zeros(shape, dtype=torch.int32)})


def test_topk_layout_is_thk_or_hkt():
    expect(r"topk_layout must be 'thk' or 'hkt', got 'HKT'", **problem(), topk_layout="HKT")


@pytest.mark.parametrize("name", ["k_cache", "v_cache"])
def test_the_caches_must_be_on_qs_device(name):
    p = problem()
    p[name] = p[name].to("meta")
    expect(rf"{name} is on meta but q is on cpu", **p)


@pytest.mark.parametrize("name,dtype,match", [
    ("q", torch.float32, r"q must be torch.bfloat16 or torch.float16, got torch.float32"),
    ("k_cache", torch.float16, r"k_cache must have q's dtype torch.bfloat16, got torch.float16"),
    ("v_cache", torch.float16, r"v_cache must have q's dtype torch.bfloat16, got torch.float16"),
])
def test_q_and_the_caches_are_bf16_or_fp16_alike(name, dtype, match):
    p = problem()
    p[name] = p[name].to(dtype)
    with pytest.raises(TypeError, match=match):
        kvcache.kvcache_attention(**p)


@pytest.mark.parametrize("name,length", [("seqused_k", 3), ("block_table", 3)])
def test_seqused_k_and_the_block_tables_rows_are_one_per_sequence_named_alone(name, length):
    p = problem()
    p[name] = torch.zeros((length,) if name == "seqused_k" else (length, 3), dtype=torch.int32)
    expect(rf"{name} must be \[B.*\].*2.*got shape \({length}", **p)


def test_a_selection_of_one_slot_per_row_may_have_any_slot_stride():
    p = problem(k=1)
    expect(r"q must be a CUDA tensor", **p | {"topk_idx": torch.zeros(3, 2, 2, dtype=torch.int32)[..., 1::2]})


def test_topk_length_is_one_dimensional():
    expect(r"topk_length must be \[Tq\] = \[3\] contiguous, got shape \(1, 3\)",
           **problem() | {"topk_length": torch.full((1, 3), 4, dtype=torch.int32)})


def test_a_nested_tensor_is_refused_by_name():
    p = problem()
    p["q"] = torch.nested.nested_tensor([p["q"][:1], p["q"][1:]])
    with pytest.raises(TypeError, match=r"q must be a dense \(strided\) tensor, got a nested tensor"):
        kvcache.kvcache_attention(**p)


def test_validate_is_a_bool():
    with pytest.raises(TypeError, match=r"validate must be a bool, got str"):
        kvcache.kvcache_attention(**problem(), validate="no")


@pytest.mark.parametrize("name", ["cu_seqlens_q", "seqused_k", "block_table", "topk_idx", "topk_length"])
def test_the_metadata_is_int32_on_qs_device(name):
    p = problem() | {"topk_length": torch.full((3,), 4, dtype=torch.int32)}
    ok = p[name]
    p[name] = ok.to(torch.int64)
    with pytest.raises(TypeError, match=rf"{name} must be torch.int32, got torch.int64"):
        kvcache.kvcache_attention(**p)
    p[name] = ok.to("meta")
    expect(rf"{name} is on meta but q is on cpu", **p)


@pytest.mark.parametrize("change,match", [
    (dict(block_size=2**32 + 16), r"block_size 4294967312 is past int32"),
    (dict(max_batch=2**32 + 1), r"max_batch 4294967297 is past int32"),
    (dict(max_batch=-1), r"max_batch must be >= 0"),
    (dict(splits=-3), r"splits must be >= 0"),
])
def test_the_plans_ints_must_fit_int32(change, match):
    expect(match, **problem() | change)


@pytest.mark.parametrize("change,error,match", [
    (dict(dtype="bf16"), TypeError, r"dtype must be torch.bfloat16 or torch.float16, got 'bf16'"),
    (dict(dtype=torch.float32), TypeError, r"dtype must be torch.bfloat16 or torch.float16"),
    (dict(block_size=16.5), TypeError, r"block_size must be an int"),
    (dict(top_k=2**32 + 16), ValueError, r"top_k 4294967312 is past int32"),
    (dict(scale=0.0), ValueError, r"scale must be a positive finite number"),
])
def test_kvcache_plan_choice_checks_its_arguments_before_the_library(change, error, match):
    shape = dict(dtype=torch.bfloat16, head_dim=64, num_q_heads=8, num_kv_heads=2, block_size=64, max_batch=4,
                 max_query_tokens=16)
    with pytest.raises(error, match=match):
        kvcache.kvcache_plan_choice(**shape | change)


@pytest.mark.parametrize("D", [8, 24, 272])
def test_a_query_head_dim_outside_16_to_256_in_steps_of_16_is_refused(D):
    expect(rf"q's head dim {D}: a multiple of 16 from 16 to 256", **problem(D=D))


@pytest.mark.parametrize("shape", [(2, 4, 4), (3, 2, 4), (2, 2, 4)])
def test_an_hkt_selection_must_be_hkv_by_tq(shape):
    expect(r"topk_idx must be \[Hkv, Tq, K\] = \[2, 3, K\] with topk_layout 'hkt'",
           **problem() | {"topk_idx": torch.zeros(shape, dtype=torch.int32)}, topk_layout="hkt")


def test_a_shared_selection_needs_one_row_per_query_token():
    expect(r"a shared selection is \[Tq, K\] = \[3, K\]", **problem() | {"topk_idx": torch.zeros(2, 4, dtype=torch.int32)})


@pytest.mark.parametrize("n, size", [(1, 1), (3, 4), (2**30, 2**30), (2**30 + 1, 2**31 - 1), (2**31 - 1, 2**31 - 1)])
def test_the_default_plan_sizes_are_powers_of_two_that_stay_within_int32(n, size):
    # A call of up to INT32_MAX sequences or query tokens: its default plan holds it in the plan's int fields
    # (2^31 would wrap to -2^31 in max_batch and pass max_query_tokens' bound).
    assert kvcache._pow2_at_least(n) == size


@pytest.mark.parametrize("n, size", [(2**30, 2**30), (2**30 + 1, 2**31 - 1025), (2**31 - 1025, 2**31 - 1025)])
def test_the_default_max_batch_stays_within_the_plans_bound(n, size):
    # libfsa takes at most INT32_MAX - 1024 sequences (its kernels step through a batch by up to 1024 threads).
    assert kvcache.MAX_BATCH == 2**31 - 1025
    assert kvcache._pow2_at_least(n, kvcache.MAX_BATCH) == size


def test_the_page_size_top_k_and_head_counts_must_fit_int32():
    # On the meta device: shapes without memory. ctypes would keep the low 32 bits of each (a plan for
    # another page size or top-k than the tensors have: a wrong answer, no error).
    p = on_meta(problem())
    k = p["k_cache"].as_strided((6, 2**32 + 16, 2, 64), (16 * 2 * 64, 0, 64, 1))
    expect(r"k_cache's page size 4294967312 is past int32", **p | {"k_cache": k, "v_cache": k})
    expect(r"topk_idx's slot count 4294967300 is past int32",
           **p | {"topk_idx": torch.empty(3, 2, 2**32 + 4, dtype=torch.int32, device="meta")})
    expect(r"q's head count 4294967296 is past int32",
           **p | {"q": torch.empty(3, 2**32, 64, dtype=torch.bfloat16, device="meta")})


def test_return_lse_is_a_bool():
    with pytest.raises(TypeError, match=r"return_lse must be a bool, got str"):
        kvcache.kvcache_attention(**problem(), return_lse="no")


def test_more_query_tokens_than_a_plan_holds_are_refused():
    p = on_meta(problem())
    T = 2**31
    p |= dict(q=torch.empty(T, 4, 64, dtype=torch.bfloat16, device="meta"),
              cu_seqlens_q=torch.empty(3, dtype=torch.int32, device="meta"),
              topk_idx=torch.empty(T, 2, 4, dtype=torch.int32, device="meta"))
    expect(r"q's token count 2147483648 is past int32", **p)


# The edges a mutation audit of the checks found open: each test fails if the check it names is dropped,
# narrowed or moved by one.


@pytest.mark.parametrize("Hq,Hkv", [(6, 4), (4, 3)])
def test_query_heads_must_be_a_multiple_of_the_kv_heads_even_when_more(Hq, Hkv):
    p = problem(Hq=Hq, Hkv=Hkv)
    expect(rf"Hq {Hq} is not a multiple of Hkv {Hkv}", **p)


def test_a_query_head_dim_of_zero_is_refused_though_it_is_a_multiple_of_16():
    p = problem() | dict(q=torch.randn(3, 4, 0).bfloat16(), k_cache=torch.randn(6, 16, 2, 0).bfloat16())
    expect(r"q's head dim 0: a multiple of 16 from 16 to 256", **p)


def test_a_value_head_dim_of_zero_is_refused_though_it_is_a_multiple_of_16():
    expect(r"v_cache's head dim 0: a multiple of 16 from 16 to 256",
           **problem() | dict(v_cache=torch.randn(6, 16, 2, 0).bfloat16()))


@pytest.mark.parametrize("shape", [(6, 16, 2, 64, 1), (6, 16, 2)])
def test_a_value_cache_of_another_rank_is_refused_though_its_pages_and_heads_match(shape):
    expect(r"v_cache \[num_pages, page_size, Hkv, Dv\] with the same pages and heads",
           **problem() | {"v_cache": torch.randn(shape).bfloat16()})


def test_caches_without_pages_are_refused():
    p = problem(pages=1)
    for name in ("k_cache", "v_cache"):
        p[name] = p[name][:0]
    expect(r"the caches have 0 pages and block_table 3 per sequence: at least one", **p)


def test_a_block_table_of_two_pages_per_row_needs_unit_column_stride():
    table = torch.zeros(2, 4, dtype=torch.int32)[:, ::2]
    expect(r"block_table's pages must be contiguous in a row \(column stride 1\), got stride 2",
           **problem() | {"block_table": table})


@pytest.mark.parametrize("name", ["q", "k_cache", "v_cache"])
def test_a_token_or_page_stride_off_a_multiple_of_8_is_refused_alone(name):
    # Only the first dimension's stride is off (4 elements past a multiple of 8): the others are fine.
    p = problem()
    t = p[name]
    st = list(t.stride())
    st[0] += 4
    odd = torch.randn(t.shape[0] * st[0]).to(t.dtype).as_strided(t.shape, st)
    expect(rf"{name}'s strides \(.*\) must be multiples of 8 elements", **p | {name: odd})


def test_one_query_token_without_a_sequence_is_refused():
    none = dict(cu_seqlens_q=torch.zeros(1, dtype=torch.int32), seqused_k=torch.zeros(0, dtype=torch.int32),
                block_table=torch.zeros(0, 3, dtype=torch.int32))
    expect(r"cu_seqlens_q describes no sequence \(B = 0\) but q has 1 tokens", **problem(tq=1) | none)


@pytest.mark.parametrize("shape", [(3, 1, 4), (3, 4, 4), (2, 3, 4)])
def test_a_thk_selection_must_be_tq_by_hkv(shape):
    expect(r"topk_idx must be \[Tq, Hkv, K\] = \[3, 2, K\]",
           **problem() | {"topk_idx": torch.zeros(shape, dtype=torch.int32)})


def test_topk_layout_none_is_refused_not_read_as_either_layout():
    # selected_attention reads None as "from the shape"; here it is neither word.
    expect(r"topk_layout must be 'thk' or 'hkt', got None", **problem(), topk_layout=None)


def test_a_page_size_head_count_and_token_count_of_exactly_int32_max_pass_the_int32_checks():
    p = on_meta(problem(Hkv=1))
    n = _lib.INT32_MAX
    k = p["k_cache"].as_strided((6, n, 1, 64), (16 * 64, 0, 64, 1))
    expect(r"q must be a CUDA tensor", **p | {"k_cache": k, "v_cache": k})
    expect(r"q must be a CUDA tensor", **p | {"q": torch.empty(3, n, 64, dtype=torch.bfloat16, device="meta")})
    tokens = dict(q=torch.empty(n, 4, 64, dtype=torch.bfloat16, device="meta"),
                  topk_idx=torch.empty(n, 1, 4, dtype=torch.int32, device="meta"))
    expect(r"q must be a CUDA tensor", **p | tokens)


@pytest.mark.parametrize("change,error,match", [
    (dict(head_dim=0), ValueError, r"head_dim must be >= 1, got 0"),
    (dict(num_kv_heads=0), ValueError, r"num_kv_heads must be >= 1, got 0"),
    (dict(max_query_tokens=0), ValueError, r"max_query_tokens must be >= 1, got 0"),
    (dict(splits=-1), ValueError, r"splits must be >= 0, got -1"),
    (dict(device=-1), ValueError, r"device must be >= 0, got -1"),
    (dict(device=True), TypeError, r"device must be an int, got bool"),
])
def test_kvcache_plan_choice_refuses_sizes_below_their_floor_before_the_library(change, error, match):
    shape = dict(dtype=torch.bfloat16, head_dim=64, num_q_heads=8, num_kv_heads=2, block_size=64, max_batch=4,
                 max_query_tokens=16)
    with pytest.raises(error, match=match):
        kvcache.kvcache_plan_choice(**shape | change)


@pytest.mark.parametrize("value_dim", [False, 0.0, "", []])
def test_kvcache_plan_choice_refuses_a_value_dim_that_is_not_an_int_though_it_is_falsy(value_dim):
    # It was checked as `value_dim or 1`, and keyed as `value_dim or head_dim`: a falsy value was head_dim.
    shape = dict(dtype=torch.bfloat16, head_dim=64, num_q_heads=8, num_kv_heads=2, block_size=64, max_batch=4,
                 max_query_tokens=16)
    with pytest.raises(TypeError, match=rf"value_dim must be an int, got {type(value_dim).__name__}"):
        kvcache.kvcache_plan_choice(**shape, value_dim=value_dim)
