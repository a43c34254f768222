"""The edges of the binding's checks and helpers that the per-module tests left open: each test fails if the
check it names is dropped or moved by one (bounds at exactly 2**31, bools where ints are taken, strided or
falling metadata, the fast path's conditions, the console commands' exit codes, the library search order)."""

import ctypes
import ctypes.util
import importlib
import os

import pytest

torch = pytest.importorskip("torch")

import fsa_jit  # noqa: E402
from fsa_jit import _fast, _gates, _lib, _nsa_node, attention, cli, compressed, kvcache  # noqa: E402
from fsa_jit import cache as cache_module  # noqa: E402
from fsa_jit.nsa import compress_mean, compressed_counts, compressed_cu_seqlens  # noqa: E402
from test_fast_path import fake, problem as fast_problem  # noqa: E402,F401  (the fixture and its problem)
from test_nsa_validation import cmp_problem, key_of, nsa_problem  # noqa: E402
from test_validation import problem as sel_problem  # noqa: E402
from test_kvcache_validation import expect as kvc_expect, problem as kvc_problem  # noqa: E402
from test_cli import run  # noqa: E402
from helpers import on_meta  # noqa: E402


# ------------------------------------------------------------ selected_attention (attention.py, _parse.py)


def test_a_query_without_heads_is_refused_by_name():
    p = sel_problem()
    p["q"] = torch.randn(10, 0, 32).bfloat16()
    with pytest.raises(ValueError, match=r"need at least one head: q has 0"):
        attention.check_arguments(**p, require_cuda=False)


def test_a_bool_block_size_is_a_type_error_not_a_block_size_of_one():
    with pytest.raises(TypeError, match=r"block_size must be an int, got bool"):
        fsa_jit.selected_attention(**sel_problem() | {"block_size": True})


def test_a_scale_that_rounds_to_infinity_in_float32_is_refused():
    # 2**128 - 2**103 is FLT_MAX plus half an ulp: it rounds (to even) to inf in float32.
    with pytest.raises(ValueError, match=r"is 0 or infinite in float32"):
        fsa_jit.selected_attention(**sel_problem(), scale=2.0**128 - 2.0**103)


def test_a_workspace_limit_with_blanks_around_it_is_a_byte_count():
    assert _lib.parse_workspace_limit(" 2G ") == 2 << 30


def test_a_finite_float_workspace_limit_is_a_type_error_not_unlimited():
    with pytest.raises(TypeError, match=r"workspace_limit must be an int"):
        _lib.parse_workspace_limit(1e301)


def test_plan_choice_takes_token_counts_past_int32(monkeypatch):
    seen = []

    class Lib:
        def fsa_plan_choice_get(self, choice, handle, operation, tokens):
            seen.append(tokens)
            return 0

        def check(self, status, function=None):
            pass

    class Plan:
        handle = 1

    monkeypatch.setattr(_lib, "get", lambda: Lib())
    monkeypatch.setattr(attention, "_get_plan", lambda *a, **k: Plan())
    fsa_jit.plan_choice(2**31, dtype=torch.bfloat16, head_dim=128, num_q_heads=4, num_kv_heads=1, block_size=64)
    assert seen == [2**31]


def test_a_tensor_whose_head_stride_is_not_a_multiple_of_8_is_copied():
    q = torch.randn(40, 4, 44).bfloat16()[..., :32]  # head stride 44
    assert attention._kernel_ready(q) is not q and attention._kernel_ready(q).is_contiguous()


# ------------------------------------------------------------ the fast path (_fast.py)


def test_a_head_stride_libfsa_cannot_read_leaves_the_fast_path():
    p = fast_problem()
    q = torch.randn(40, 4, 44).bfloat16()[..., :32]  # token stride 176 (a multiple of 8), head stride 44
    assert not _fast._in_place(q, p["k"], p["v"], p["topk_idx"])


def test_an_empty_call_makes_no_plan(fake):
    lib, counts = fake
    o = fsa_jit.selected_attention(**fast_problem(T=0, cu=(0, 0)))
    assert o.shape == (0, 4, 32) and counts["plan"] == 0


def test_a_workspace_libfsa_finds_too_small_is_sized_again_and_the_call_retried(fake):
    lib, counts = fake
    statuses = [_lib.FSA_STATUS_WORKSPACE_TOO_SMALL, _lib.FSA_STATUS_OK]
    record = lib.fsa_selected_attention_fwd
    lib.fsa_selected_attention_fwd = lambda handle, ref, stream: record(handle, ref, stream) * 0 + statuses.pop(0)
    fsa_jit.selected_attention(**fast_problem())
    assert len(lib.calls) == 2 and statuses == []


def test_the_operators_entry_of_a_validating_call_has_a_validating_plan(fake):
    lib, counts = fake
    p = fast_problem()
    args = (p["q"], p["k"], p["v"], p["topk_idx"], 16, 0.0, 0, "hkt", 0, False)
    plain = _fast.op_entry(*args, False)
    assert _fast.op_entry(*args, True) is not plain and counts["plan"] == 2


def test_the_fast_paths_entries_are_capped(monkeypatch):
    monkeypatch.setattr(_fast, "_entries", {})
    for n in range(_fast.MAX_ENTRIES + 1):
        _fast._insert(n, object())
    assert len(_fast._entries) <= _fast.MAX_ENTRIES


# ------------------------------------------------------------ compressed, gates, NSA layer


@pytest.mark.parametrize("change, match", [
    (dict(kernel_size=131, stride=2, block_size=64), r"at most 64 strides per kernel"),
    (dict(kernel_size=32, stride=32, block_size=48), r"block_size 48 must be a multiple of stride 32"),
    (dict(block_size=0), r"block_size must be >= 1, got 0"),
])
def test_selection_parameters_libfsa_refuses_are_refused_before_it(change, match):
    with pytest.raises(ValueError, match=match):
        fsa_jit.compressed_attention(**cmp_problem() | change, top_k=4)


def test_more_sequences_than_query_tokens_are_refused_by_the_compressed_branch():
    p = cmp_problem(T=2) | dict(cu_seqlens=torch.tensor([0, 1, 1, 2], dtype=torch.int32),
                                cu_seqlens_c=torch.zeros(4, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"3 sequences for only 2 tokens"):
        fsa_jit.compressed_attention(**p)


def test_a_bool_gate_is_a_type_error_not_a_gate_of_one():
    with pytest.raises(TypeError, match=r"g_cmp must be a tensor"):
        _gates.check("g_cmp", True, 40, 4, torch.device("cpu"))


def test_a_one_element_gate_may_live_on_another_device():  # the docstring's promise
    assert _gates.check("g_cmp", torch.tensor([0.5]), 40, 4, torch.device("meta")) is False


def test_a_bool_gate_takes_no_key_so_the_checks_refuse_it():
    assert key_of(g_win=True) is None


def test_a_dispatch_mode_makes_a_checked_layout_take_the_operators(monkeypatch):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    p = nsa_problem()
    key = key_of()
    monkeypatch.setitem(_nsa_node._specs, key, object())
    monkeypatch.setattr(_nsa_node, "_run", lambda *a: "ran the kernels under the mode")
    with Watch():
        out = _nsa_node.cached(key, p["q"], p["k"], p["v"], p["k_cmp"], p["v_cmp"], (p["g_cmp"], p["g_sel"], p["g_win"]),
                               p["cu_seqlens"], p["cu_seqlens_c"], None, None)
    assert out is None


def test_a_sequence_shorter_than_kernel_minus_stride_has_no_compressed_tokens_not_a_negative_count():
    assert compressed_counts([0, 10, 50], 32, 16) == [0, 0, 2]
    assert compressed_cu_seqlens(torch.tensor([0, 10, 60], dtype=torch.int32), 32, 16).tolist() == [0, 0, 2]


def test_offsets_that_do_not_start_at_0_are_refused_by_compressed_cu_seqlens():
    with pytest.raises(ValueError, match=r"cu_seqlens must start at 0"):
        compressed_cu_seqlens(torch.tensor([4, 10], dtype=torch.int32), 4, 2)


def test_bool_offsets_are_a_type_error():
    with pytest.raises(TypeError, match=r"cu_seqlens must be an integer tensor"):
        compress_mean(torch.randn(2, 1, 16), torch.tensor([False, True]), kernel_size=1, stride=1)


# ------------------------------------------------------------ kvcache_attention


def test_one_sequence_past_max_batch_is_refused():
    b = kvcache.MAX_BATCH + 1
    kvc_expect(r"describes 2147482624 sequences: at most 2147482623",
               **kvc_problem() | dict(cu_seqlens_q=torch.zeros(1, dtype=torch.int32).expand(b + 1),
                                      seqused_k=torch.zeros(1, dtype=torch.int32).expand(b),
                                      block_table=torch.zeros(1, 3, dtype=torch.int32).expand(b, 3)))


def test_a_block_table_without_pages_is_refused_before_libfsa():
    kvc_expect(r"block_table 0 per sequence: at least one", **kvc_problem() | {"block_table": torch.zeros(2, 0, dtype=torch.int32)})


def test_a_strided_topk_length_is_refused_as_it_is_read_in_place():
    kvc_expect(r"topk_length must be \[Tq\] = \[3\] contiguous",
               **kvc_problem(), topk_length=torch.full((6,), 4, dtype=torch.int32)[::2])


def test_a_slot_count_or_pages_per_sequence_of_exactly_2_to_the_31_is_refused():
    p = on_meta(kvc_problem())
    kvc_expect(r"slot count 2147483648 is past int32",
               **p | {"topk_idx": torch.empty(3, 2, 2**31, dtype=torch.int32, device="meta")})
    kvc_expect(r"block_table has 2147483648 pages per sequence",
               **p | {"block_table": torch.empty(2, 2**31, dtype=torch.int32, device="meta")})


# ------------------------------------------------------------ finding libfsa (_lib.py)


def source_tree(tmp_path, monkeypatch, header=True):
    if header:
        (tmp_path / "include").mkdir()
        (tmp_path / "include" / "fsa.h").write_text("")
    (tmp_path / "python" / "fsa_jit").mkdir(parents=True)
    monkeypatch.setattr(_lib, "__file__", str(tmp_path / "python" / "fsa_jit" / "_lib.py"))


def test_the_newest_build_folder_comes_first(monkeypatch, tmp_path):
    source_tree(tmp_path, monkeypatch)
    for name, when in (("build-old", 1_000_000), ("build-new", 2_000_000)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "libfsa.so").write_bytes(b"")
        os.utime(tmp_path / name / "libfsa.so", (when, when))
    paths = _lib.candidate_paths()
    assert paths.index(str(tmp_path / "build-new" / "libfsa.so")) < paths.index(str(tmp_path / "build-old" / "libfsa.so"))


def test_a_build_folders_configuration_subfolder_is_searched(monkeypatch, tmp_path):
    source_tree(tmp_path, monkeypatch)
    (tmp_path / "build" / "Release").mkdir(parents=True)
    (tmp_path / "build" / "Release" / "libfsa.so").write_bytes(b"")
    assert str(tmp_path / "build" / "Release" / "libfsa.so") in _lib.candidate_paths()


def test_build_folders_are_searched_only_in_a_source_tree(monkeypatch, tmp_path):
    source_tree(tmp_path, monkeypatch, header=False)
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "libfsa.so").write_bytes(b"")
    assert str(tmp_path / "build" / "libfsa.so") not in _lib.candidate_paths()


def test_each_candidate_is_listed_once(monkeypatch):
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "libfsa.so")
    paths = _lib.candidate_paths()
    assert len(paths) == len(set(paths))


def test_a_version_without_a_numeric_major_has_the_plain_soname():
    assert _lib.soname("dev.1") == "libfsa.so"


# ------------------------------------------------------------ the console commands (cli.py), cache.py


def test_a_range_that_falls_is_a_usage_error():
    with pytest.raises(Exception, match=r"'8-1' is not a range"):
        cli._int_list("8-1")


def test_page_sizes_count_in_the_grids_size(capsys):
    # 1000 groups x 16 head dims x 3 block sizes x 2 dtypes = 96000 shapes, x 6 page sizes = 576000.
    args = ["--arch", "sm_80", "--kind", "kvcache", "--group", "1-1000", "--head-dim", "16-256:16",
            "--block-size", "16,32,64", "--dtype", "bf16,f16", "--page-size", "1,16,32,64,128,256"]
    p = cli._precompile_parser()
    with pytest.raises(SystemExit) as e:
        cli._check_precompile_options(p, p.parse_args(args))
    assert e.value.code == 2 and "more than 100000 combinations" in capsys.readouterr().err


def test_a_malformed_target_name_exits_3(lib, capsys, tmp_path):
    rc, _, err = run(cli.precompile_main, ["--list", "--arch", "bogus", "--cache-dir", str(tmp_path)], capsys)
    assert rc == 3 and "not a target name" in err


def test_an_invalid_argument_of_another_call_than_the_contexts_exits_1(capsys, monkeypatch):
    def fail(a):
        raise _lib.FsaError(_lib.FSA_STATUS_INVALID_ARGUMENT, "FSA_STATUS_INVALID_ARGUMENT", "bad", "fsa_cache_list")

    monkeypatch.setattr(cli, "_maintain", fail)
    rc, _, err = run(cli.precompile_main, ["--list"], capsys)
    assert rc == 1 and "fsa_cache_list" in err


def test_a_grid_with_failures_is_not_said_to_be_all_skipped(capsys, monkeypatch):
    from test_cli import summary_of

    monkeypatch.setattr(importlib.import_module("fsa_jit.precompile"), "precompile",
                        lambda **kw: summary_of(skipped=2, failed=1))
    rc, _, err = run(cli.precompile_main, ["--arch", "sm_80"], capsys)
    assert rc == 1 and "every shape was skipped" not in err


def test_bench_takes_one_dtype_per_run(capsys):
    rc, _, err = run(cli.bench_main, ["--dtype", "bf16,f16"], capsys)
    assert rc == 2 and "--dtype: one type per run" in err


def test_bench_without_a_gpu_exits_3(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rc, _, err = run(cli.bench_main, [], capsys)
    assert rc == 3 and "no CUDA device" in err


def test_sizes_past_the_largest_unit_print_in_tib():
    assert cli._human_bytes(2**50) == "1024.0 TiB"


def test_verify_with_detect_marks_only_the_gpus_own_entries_as_not_loaded(capsys, monkeypatch):
    entries = [cache_module.CacheEntry("/c/a", "k_a", "sm_80", 1, 0, True, False, False),
               cache_module.CacheEntry("/c/b", "k_b", "sm_90", 1, 0, True, False, False)]
    monkeypatch.setattr(cache_module, "verify_cache", lambda **kw: {"cache_dir": "/c", "entries": entries, "bad": 0,
                                                                    "deleted": 0, "loaded": 0, "target": "sm_90",
                                                                    "bytes": 2})
    rc, out, _ = run(cli.precompile_main, ["--verify", "--detect"], capsys)
    assert rc == 0
    assert "OK  sm_80    k_a\n" in out and "OK  sm_90    k_b (not loaded)\n" in out


def test_a_prune_that_could_not_read_a_directory_leaves_the_bytes_left_unknown(monkeypatch, tmp_path):
    class Lib:
        def fsa_cache_prune(self, ctx, limit, removed, left):
            removed._obj.value, left._obj.value = 2, 2**64 - 1
            return _lib.FSA_STATUS_CACHE_IO

        def error(self, status, function):
            return _lib.FsaError(status, "FSA_STATUS_CACHE_IO", "unreadable", function)

        def fsa_context_destroy(self, ctx):
            pass

    monkeypatch.setattr(_lib, "get", lambda: Lib())
    monkeypatch.setattr(cache_module, "_open_context", lambda *a: 1)
    monkeypatch.setattr(cache_module, "_disk_cache_dir", lambda lib, ctx: str(tmp_path))
    with pytest.raises(_lib.FsaError) as caught:
        fsa_jit.prune_cache(0, cache_dir=str(tmp_path))
    assert (caught.value.removed, caught.value.bytes_left) == (2, None)
