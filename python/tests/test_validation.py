"""selected_attention rejects bad arguments before any device or library call.

Runs on a CPU-only machine: every check except the device check comes before
it, so CPU tensors reach each of them."""

import pytest

torch = pytest.importorskip("torch")

import fsa_jit  # noqa: E402
from helpers import on_meta  # noqa: E402
from fsa_jit import _lib, attention  # noqa: E402


def problem(T=10, Hq=4, Hkv=2, D=32, K=3, BK=16, dtype=torch.bfloat16, layout="hkt"):
    q = torch.randn(T, Hq, D).to(dtype)
    k = torch.randn(T, Hkv, D).to(dtype)
    v = torch.randn(T, Hkv, D).to(dtype)
    shape = (Hkv, T, K) if layout == "hkt" else (T, Hkv, K)
    topk = torch.zeros(shape, dtype=torch.int32)
    cu = torch.tensor([0, 4, T], dtype=torch.int32)
    return dict(q=q, k=k, v=v, topk_idx=topk, cu_seqlens=cu, block_size=BK)


@pytest.fixture(autouse=True)
def no_library(monkeypatch):
    """Any use of libfsa, or of the plan cache, fails the test."""

    def reached(*args, **kwargs):
        raise AssertionError("validation let a bad call through to libfsa")

    monkeypatch.setattr(_lib, "get", reached)
    monkeypatch.setattr(attention, "_get_plan", reached)


def expect(error, match, **call):
    # (no_library fails any call that reaches libfsa or the plan cache)
    with pytest.raises(error, match=match):
        fsa_jit.selected_attention(**call)


def test_cpu_tensors_are_rejected():
    expect(ValueError, r"q must be a CUDA tensor", **problem())


def test_a_valid_cpu_call_fails_only_on_the_device():
    # Every other check passes: the device check is the one that fires.
    p = problem(layout="thk")
    expect(ValueError, r"CUDA tensor", **p, scale=0.5, max_seqlen=6, return_lse=True, algorithm="NSA")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32])
def test_unsupported_dtype(dtype):
    p = problem()
    p["q"] = p["q"].to(dtype)
    expect(TypeError, r"q must be torch.float16 or torch.bfloat16", **p)


def test_mixed_dtypes():
    p = problem(dtype=torch.float16)
    p["v"] = p["v"].to(torch.bfloat16)
    expect(TypeError, r"same dtype", **p)


@pytest.mark.parametrize("what", ["topk_idx", "cu_seqlens"])
def test_indices_must_be_int32(what):
    p = problem()
    p[what] = p[what].long()
    expect(TypeError, what + r" must be torch.int32", **p)


@pytest.mark.parametrize("what", ["q", "k", "v", "topk_idx", "cu_seqlens"])
def test_a_sparse_tensor_is_refused_as_not_dense(what):
    p = problem()
    p[what] = p[what].to_sparse()
    expect(TypeError, rf"{what} must be a dense \(strided\) tensor, got layout torch.sparse_coo", **p)


def test_not_a_tensor():
    p = problem()
    p["k"] = p["k"].tolist()
    expect(TypeError, r"k must be a torch.Tensor", **p)


def test_heads_must_divide():
    p = problem(Hq=6, Hkv=4)
    expect(ValueError, r"multiple of the number of KV heads", **p)


@pytest.mark.parametrize("D", [8, 40, 100, 272])
def test_head_dim(D):
    expect(ValueError, rf"head_dim {D} is not supported", **problem(D=D))


def test_head_dims_differ():
    p = problem()
    p["k"] = torch.randn(10, 2, 64).to(torch.bfloat16)
    p["v"] = p["k"].clone()
    expect(ValueError, r"head_dim", **p)


@pytest.mark.parametrize("BK", [0, 8, 48, 512])
def test_block_size(BK):
    expect(ValueError, r"block_size must be one of", **problem(BK=BK))


def test_block_size_type():
    p = problem()
    p["block_size"] = 64.0
    expect(TypeError, r"block_size must be an int", **p)


@pytest.mark.parametrize("K", [0, 65])
def test_top_k_range(K):
    expect(ValueError, r"top-k .* must be 1..64", **problem(K=K))


def test_token_counts_differ():
    p = problem()
    p["k"] = p["k"][:9]
    p["v"] = p["v"][:9]
    expect(ValueError, r"q has T=10 tokens but k and v have 9", **p)


def test_k_v_shapes_differ():
    p = problem()
    p["v"] = p["v"][:, :1]
    expect(ValueError, r"k and v must have the same tokens and KV heads", **p)


def test_a_value_head_dim_other_than_the_key_head_dim_fails_only_on_the_device():
    for dv in (16, 64, 128, 256):
        p = problem(D=192)
        p["v"] = torch.randn(10, 2, dv).to(torch.bfloat16)
        expect(ValueError, r"CUDA tensor", **p)


@pytest.mark.parametrize("Dv", [8, 40, 100, 272])
def test_value_head_dim(Dv):
    p = problem()
    p["v"] = torch.randn(10, 2, Dv).to(torch.bfloat16)
    expect(ValueError, rf"v's head dim {Dv} is not supported", **p)


def test_q_and_k_must_share_the_head_dim_when_v_differs():
    p = problem(D=64)
    p["k"] = torch.randn(10, 2, 128).to(torch.bfloat16)
    expect(ValueError, r"q has head_dim 64 but k has 128", **p)


def test_a_differentiable_call_with_dims_over_320_together_needs_dims_that_are_multiples_of_32():
    p = problem(D=192)
    p["v"] = torch.randn(10, 2, 144).to(torch.bfloat16).requires_grad_()
    expect(ValueError, r"both must be multiples of 32", **p)
    p["v"] = p["v"].detach()  # without gradients the forward takes them
    expect(ValueError, r"CUDA tensor", **p)
    p["v"].requires_grad_()
    with torch.no_grad():  # nor does a call outside grad mode make one
        expect(ValueError, r"CUDA tensor", **p)


@pytest.mark.parametrize("hq,hkv,algorithm,match", [
    (256, 1, "auto", r"group size 256 \(Hq 256 / Hkv 1\): at most 128 query heads per KV head"),
    (128, 1, "fsa", r"algorithm 'fsa' takes groups of at most 64 query heads per KV head, got 128"),
])
def test_groups_past_the_librarys_limits_are_refused_before_it(hq, hkv, algorithm, match):
    p = problem(Hq=hq, Hkv=hkv)
    expect(ValueError, match, **p, algorithm=algorithm)
    expect(ValueError, r"CUDA tensor", **problem(Hq=hq // 2, Hkv=hkv), algorithm=algorithm)  # the limit itself


def test_the_nsa_path_needs_a_grid_row_per_kv_head_and_16_heads_of_its_group():
    q = torch.empty(1, 65536 * 2, 16, dtype=torch.bfloat16)  # 65536 KV heads of G 2: one row each, too many
    k = torch.empty(1, 65536, 16, dtype=torch.bfloat16)
    call = dict(q=q, k=k, v=k, topk_idx=torch.zeros(65536, 1, 1, dtype=torch.int32),
                cu_seqlens=torch.tensor([0, 1], dtype=torch.int32), block_size=16)
    expect(ValueError, r"algorithm 'nsa' needs a grid row per KV head and 16 heads of its group: 65536 KV heads "
                       r"at group 2 pass 65535 rows", **call, algorithm="nsa")


@pytest.mark.parametrize("name", ["q", "k", "v"])
def test_rank(name):
    p = problem()
    p[name] = p[name].flatten(1)
    expect(ValueError, name + r" must be 3-D", **p)


def test_topk_shape():
    p = problem()
    p["topk_idx"] = torch.zeros(3, 10, 3, dtype=torch.int32)
    expect(ValueError, r"topk_idx must be \[Hkv, T, K\]", **p)
    p["topk_idx"] = torch.zeros(2, 10, dtype=torch.int32)
    expect(ValueError, r"topk_idx must be 3-D", **p)


def test_ambiguous_topk_layout():
    p = problem(T=2, Hq=2, Hkv=2)
    p["cu_seqlens"] = torch.tensor([0, 2], dtype=torch.int32)
    expect(ValueError, r"ambiguous.*topk_layout", **p)
    # Saying which layout passes every check up to the device one.
    expect(ValueError, r"CUDA tensor", **p, topk_layout="thk")


def test_topk_layout_checked():
    p = problem(layout="thk")
    expect(ValueError, r"topk_layout='hkt'", **p, topk_layout="hkt")
    expect(ValueError, r"topk_layout must be", **p, topk_layout="khT")


def test_cu_seqlens_shape():
    p = problem()
    p["cu_seqlens"] = torch.zeros(1, dtype=torch.int32)
    expect(ValueError, r"cu_seqlens must be 1-D", **p)
    p["cu_seqlens"] = torch.zeros(2, 2, dtype=torch.int32)
    expect(ValueError, r"cu_seqlens must be 1-D", **p)
    p["cu_seqlens"] = torch.zeros(12, dtype=torch.int32)
    expect(ValueError, r"11 sequences for only 10 tokens", **p)


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf")])
def test_scale(scale):
    expect(ValueError, r"scale must be a positive finite number", **problem(), scale=scale)


def test_max_seqlen():
    expect(ValueError, r"max_seqlen must be in 0..T", **problem(), max_seqlen=11)
    expect(TypeError, r"max_seqlen must be a Python int", **problem(), max_seqlen=torch.tensor(4))


def test_algorithm():
    expect(ValueError, r"algorithm must be 'auto', 'fsa' or 'nsa'", **problem(), algorithm="fast")


def test_set_tuning_takes_off_on_force_or_none_only():
    for mode in ("off", "on", "force", None):
        fsa_jit.set_tuning(mode)
    fsa_jit.set_tuning(None)
    with pytest.raises(ValueError):
        fsa_jit.set_tuning("sometimes")


@pytest.mark.parametrize("scale", [1e-46, 1e39, 2**1000, pytest.param(10**400, id="10**400")])
def test_a_scale_that_is_zero_or_infinite_in_float32_is_refused(scale):
    # The plan holds a float32, where 0 means the default: 1e-46 would silently become 1/sqrt(D).
    expect(ValueError, r"is 0 or infinite in float32", **problem(), scale=scale)


class _ChoiceLib:
    """A libfsa whose plan_choice_get answers without a device."""

    fsa_plan_choice_get = staticmethod(lambda choice, handle, operation, tokens: 0)

    def check(self, status, function=None):
        pass


def test_plan_choice_takes_the_algorithm_in_any_case_as_selected_attention_does(monkeypatch):
    seen = []

    class Plan:
        handle = 1

    def get_plan(lib, device, dtype, head_dim, hq, hkv, block_size, top_k, scale, algorithm, *rest, **kw):
        seen.append(algorithm)
        return Plan()

    monkeypatch.setattr(_lib, "get", lambda: _ChoiceLib())
    monkeypatch.setattr(attention, "_get_plan", get_plan)
    shape = dict(dtype=torch.bfloat16, head_dim=128, num_q_heads=4, num_kv_heads=1, block_size=64)
    for algorithm in ("FSA", "nsa", "Auto"):
        fsa_jit.plan_choice(1024, **shape, algorithm=algorithm)
    assert seen == [_lib.FSA_ALGORITHM_FSA, _lib.FSA_ALGORITHM_NSA, _lib.FSA_ALGORITHM_AUTO]


@pytest.mark.parametrize("change,error,match", [
    (dict(algorithm="dense"), ValueError, r"algorithm must be 'auto', 'fsa' or 'nsa', got 'dense'"),
    (dict(algorithm=None), ValueError, r"algorithm must be"),
    (dict(dtype=torch.float32), TypeError, r"dtype must be torch.bfloat16 or torch.float16, got torch.float32"),
    (dict(dtype="bf16"), TypeError, r"dtype must be torch.bfloat16 or torch.float16, got 'bf16'"),
    (dict(top_k=2**32 + 16), ValueError, r"top_k 4294967312 is past int32"),
    (dict(head_dim=128.0), TypeError, r"head_dim must be an int"),
])
def test_plan_choice_refuses_what_selected_attention_refuses_before_the_library(change, error, match):
    shape = dict(dtype=torch.bfloat16, head_dim=128, num_q_heads=4, num_kv_heads=1, block_size=64) | change
    with pytest.raises(error, match=match):
        fsa_jit.plan_choice(1024, **shape)


def test_keys_and_values_with_more_tokens_than_the_queries_are_refused():
    # Not only fewer: a longer k/v pack is another packing of the batch, never a valid one.
    p = problem()
    p["k"] = torch.randn(11, 2, 32).to(torch.bfloat16)
    p["v"] = torch.randn(11, 2, 32).to(torch.bfloat16)
    expect(ValueError, r"q has T=10 tokens but k and v have 11", **p)


def test_keys_with_a_narrower_head_dim_than_the_queries_are_refused():
    # libfsa reads D columns of k for each key: a narrower k would be read past its rows.
    p = problem(D=64)
    p["k"] = torch.randn(10, 2, 32).to(torch.bfloat16)
    p["v"] = torch.randn(10, 2, 32).to(torch.bfloat16)
    expect(ValueError, r"q has head_dim 64 but k has 32", **p)


@pytest.mark.parametrize("flag", [True, False])
def test_a_bool_max_seqlen_is_a_type_error_rather_than_a_length_of_one_or_zero(flag):
    expect(TypeError, r"max_seqlen must be a Python int or None", **problem(), max_seqlen=flag)


def test_a_nested_tensor_is_refused_by_name_not_by_a_torch_internal_error():
    p = problem()
    p["q"] = torch.nested.nested_tensor([p["q"][:4], p["q"][4:]])
    expect(TypeError, r"q must be a dense \(strided\) tensor, got a nested tensor", **p)


@pytest.mark.parametrize("value", ["no", 1, None])
def test_validate_is_a_bool_not_any_truthy_value(value):
    expect(TypeError, rf"validate must be a bool, got {type(value).__name__}", **problem(), validate=value)


def test_set_tuning_takes_any_case_as_fsa_tune_does_and_names_a_wrong_type():
    try:
        fsa_jit.set_tuning("ON")
        assert attention._tune == "on"
        with pytest.raises(TypeError, match=r"tuning mode must be a str or None, got list"):
            fsa_jit.set_tuning([])
        with pytest.raises(ValueError, match=r"tuning mode 'Sometimes'"):
            fsa_jit.set_tuning("Sometimes")
    finally:
        fsa_jit.set_tuning(None)


def test_more_tokens_than_libfsa_takes_are_refused_before_any_output_is_made():
    # On the meta device (shapes without memory): libfsa takes at most INT32_MAX - 1 tokens.
    T = 2**31 - 1
    p = on_meta(problem())
    p |= dict(q=torch.empty(T, 4, 32, dtype=torch.bfloat16, device="meta"),
              k=torch.empty(T, 2, 32, dtype=torch.bfloat16, device="meta"),
              v=torch.empty(T, 2, 32, dtype=torch.bfloat16, device="meta"),
              topk_idx=torch.empty(2, T, 3, dtype=torch.int32, device="meta"))
    expect(ValueError, r"q has 2147483647 tokens: at most 2147483646", **p)


# The edges a mutation audit of the checks found open: each test fails if the check it names is dropped,
# narrowed or moved by one.


def test_a_selection_of_four_dimensions_is_refused():
    p = problem()
    p["topk_idx"] = p["topk_idx"].unsqueeze(-1)
    expect(ValueError, r"topk_idx must be 3-D, \[Hkv, T, K\] or \[T, Hkv, K\], got shape \(2, 10, 3, 1\)", **p)


def test_check_arguments_takes_a_differentiable_value_alone_for_a_backward_call():
    # Only v requires grad: the backward's head dims are checked all the same (192 + 144, 144 not a multiple
    # of 32), by check_arguments itself, not only by the operator that selected_attention calls next.
    p = problem(D=192)
    p["v"] = torch.randn(10, 2, 144).to(torch.bfloat16).requires_grad_()
    assert not p["q"].requires_grad and not p["k"].requires_grad
    with pytest.raises(ValueError, match=r"the backward with head dims 192 \(q, k\) and 144 \(v\)"):
        attention.check_arguments(**p, require_cuda=False)


@pytest.mark.parametrize("algorithm", [None, 1, b"fsa"])
def test_an_algorithm_that_is_not_a_string_is_a_value_error_naming_it(algorithm):
    expect(ValueError, rf"algorithm must be 'auto', 'fsa' or 'nsa', got {algorithm!r}", **problem(), algorithm=algorithm)


def test_the_fsa_group_limit_holds_for_the_algorithm_in_any_case():
    expect(ValueError, r"algorithm 'fsa' takes groups of at most 64 query heads per KV head, got 128",
           **problem(Hq=128, Hkv=1), algorithm="FSA")


def test_the_nsa_grid_limit_holds_for_the_algorithm_in_any_case():
    q = torch.empty(1, 65536 * 2, 16, dtype=torch.bfloat16)
    k = torch.empty(1, 65536, 16, dtype=torch.bfloat16)
    call = dict(q=q, k=k, v=k, topk_idx=torch.zeros(65536, 1, 1, dtype=torch.int32),
                cu_seqlens=torch.tensor([0, 1], dtype=torch.int32), block_size=16)
    expect(ValueError, r"algorithm 'nsa' needs a grid row per KV head", **call, algorithm="Nsa")


@pytest.mark.parametrize("layout", ["", "HKT", " thk"])
def test_a_topk_layout_other_than_the_two_words_is_refused_not_read_as_thk(layout):
    expect(ValueError, r"topk_layout must be 'hkt' \(\[Hkv, T, K\]\), 'thk' \(\[T, Hkv, K\]\) or None",
           **problem(layout="thk"), topk_layout=layout)


@pytest.mark.parametrize("name", ["head_dim", "num_q_heads", "num_kv_heads", "block_size", "top_k"])
def test_plan_choice_refuses_a_size_of_zero_before_the_library(name):
    shape = dict(dtype=torch.bfloat16, head_dim=128, num_q_heads=4, num_kv_heads=1, block_size=64) | {name: 0}
    with pytest.raises(ValueError, match=rf"{name} must be >= 1, got 0"):
        fsa_jit.plan_choice(1024, **shape)


@pytest.mark.parametrize("value_dim", [False, 0.0, "", []])
def test_plan_choice_refuses_a_value_dim_that_is_not_an_int_though_it_is_falsy(value_dim):
    # It was checked as `value_dim or 1`: any falsy value passed, and went on as value_dim.
    shape = dict(dtype=torch.bfloat16, head_dim=128, num_q_heads=4, num_kv_heads=1, block_size=64)
    with pytest.raises(TypeError, match=rf"value_dim must be an int, got {type(value_dim).__name__}"):
        fsa_jit.plan_choice(1024, **shape, value_dim=value_dim)


def test_plan_choice_of_value_dim_0_or_head_dim_answers_from_the_plan_a_call_uses(monkeypatch):
    # 0 means head_dim; cached under 0 it was a second plan, whose tuning state is not the calls' plan's.
    keys = []

    def get_plan(lib, device, dtype, head_dim, hq, hkv, block_size, top_k, scale, algorithm, workspace_limit,
                 backward, validate=False, value_dim=None):
        keys.append(head_dim if value_dim is None else value_dim)  # as _get_plan keys it

        class Plan:
            handle = 1
        return Plan()

    monkeypatch.setattr(_lib, "get", lambda: _ChoiceLib())
    monkeypatch.setattr(attention, "_get_plan", get_plan)
    shape = dict(dtype=torch.bfloat16, head_dim=128, num_q_heads=4, num_kv_heads=1, block_size=64)
    for value_dim in (None, 0, 128):
        fsa_jit.plan_choice(1024, **shape, value_dim=value_dim)
    assert keys == [128, 128, 128]
