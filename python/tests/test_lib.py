"""Finding libfsa, its errors, and precompile (CPU only: offline targets)."""

import ctypes
import importlib
import os
import sys
import threading
import time

import pytest

import fsa_jit
from fsa_jit import _lib
from helpers import precompile_or_skip


def test_explicit_path_that_does_not_load(monkeypatch, tmp_path):
    missing = tmp_path / "libfsa.so"
    monkeypatch.setenv("FSA_LIBRARY", str(missing))
    with pytest.raises(fsa_jit.FsaLibraryNotFound, match=f"FSA_LIBRARY={missing}"):
        _lib.load_library()


def test_nothing_found_says_how_to_fix(monkeypatch):
    monkeypatch.delenv("FSA_LIBRARY", raising=False)
    monkeypatch.setattr(_lib, "candidate_paths", lambda: ["/nonexistent/libfsa.so"])
    with pytest.raises(fsa_jit.FsaLibraryNotFound) as e:
        _lib.load_library()
    assert "/nonexistent/libfsa.so" in str(e.value) and "FSA_LIBRARY" in str(e.value)
    assert isinstance(e.value, OSError)


def test_not_a_libfsa(monkeypatch):
    libc = ctypes.util.find_library("c")
    if libc is None:
        pytest.skip("no libc found")
    with pytest.raises(fsa_jit.FsaLibraryNotFound, match="missing fsa_"):
        _lib.load_library(libc)


def test_the_package_copy_comes_first_then_the_loader_path(monkeypatch, tmp_path):
    package = tmp_path / "fsa_jit"
    package.mkdir()
    (package / "libfsa.so.0.1").write_bytes(b"")
    monkeypatch.setattr(fsa_jit, "__path__", [str(package)])
    paths = _lib.candidate_paths()
    assert paths[0] == str(package / "libfsa.so.0.1")
    assert paths.index(_lib.soname()) > 0


def test_an_editable_installs_library_beside_the_source_package_is_found(monkeypatch, tmp_path):
    # An editable install: the built library in site-packages/fsa_jit, the modules in the source tree.
    site, source = tmp_path / "site" / "fsa_jit", tmp_path / "src" / "fsa_jit"
    site.mkdir(parents=True)
    source.mkdir(parents=True)
    (site / "libfsa.so.0.1").write_bytes(b"")
    monkeypatch.setattr(fsa_jit, "__path__", [str(site), str(source)])
    monkeypatch.setattr(_lib, "__file__", str(source / "_lib.py"))
    assert _lib.candidate_paths()[0] == str(site / "libfsa.so.0.1")


def test_soname_follows_the_versioning_policy():
    assert _lib.soname("0.1.0") == "libfsa.so.0.1"
    assert _lib.soname("0.12.3") == "libfsa.so.0.12"
    assert _lib.soname("1.4.2") == "libfsa.so.1"


def test_package_version_is_the_version_file():
    version_file = _lib.c_source_dir() / "VERSION"
    if not version_file.is_file():
        pytest.skip("not running from the source tree")
    assert fsa_jit.__version__ == version_file.read_text().strip()


def test_python_and_library_versions_agree(lib):
    assert lib.version() == fsa_jit.__version__


def test_one_set_of_dtype_spellings():
    for name in ("bf16", "bfloat16", "BF16", "torch.bfloat16"):
        assert _lib.dtype_code(name) == _lib.FSA_DTYPE_BF16
    for name in ("fp16", "f16", "float16", "half", "torch.float16"):
        assert _lib.dtype_code(name) == _lib.FSA_DTYPE_F16
    for name in ("fp8", "float32", "bf", ""):
        with pytest.raises(ValueError, match="expected one of bf16, bfloat16, fp16, f16, float16, half"):
            _lib.dtype_code(name)


def test_pip_nvrtc_directories_are_passed_to_libfsa(monkeypatch, tmp_path):
    site = tmp_path / "site-packages"
    (site / "nvidia" / "cu13" / "lib").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("FSA_PYTHON_SITE_DIRS", raising=False)
    importlib.invalidate_caches()
    monkeypatch.delitem(sys.modules, "nvidia", raising=False)
    assert str(site) in _lib.python_site_dirs()
    _lib._tell_libfsa_where_pip_nvrtc_is()
    assert str(site) in os.environ["FSA_PYTHON_SITE_DIRS"].split(":")
    # A value the user set is left alone.
    monkeypatch.setenv("FSA_PYTHON_SITE_DIRS", "/mine")
    _lib._tell_libfsa_where_pip_nvrtc_is()
    assert os.environ["FSA_PYTHON_SITE_DIRS"] == "/mine"


def test_loaded(lib):
    assert lib.version().count(".") == 2
    assert fsa_jit.library_path() == lib.path


def test_error_carries_status_name_and_detail(lib):
    options = _lib.fsa_context_options(device=fsa_jit.FSA_DEVICE_NONE, target=None,
                                       cache_mode=_lib.FSA_CACHE_MODE_OFF, log=-1)
    ctx = ctypes.c_void_p()
    st = lib.fsa_context_create(ctypes.byref(ctx), ctypes.byref(options))
    assert st != _lib.FSA_STATUS_OK  # an offline context needs a target
    with pytest.raises(fsa_jit.FsaError) as e:
        lib.check(st, "fsa_context_create")
    err = e.value
    assert err.status == st and err.name == lib.status_name(st)
    assert err.name in str(err) and err.message and err.message in str(err)
    assert "fsa_context_create" in str(err)


def test_library_without_backward_still_loads(lib):
    class NoBackward:
        def __getattr__(self, name):
            if name in _lib.OPTIONAL_FUNCTIONS:
                raise AttributeError(name)
            return getattr(lib.cdll, name)

    stub = _lib.Library(NoBackward(), "stub")
    assert not stub.has_backward
    with pytest.raises(RuntimeError, match="fsa_selected_attention_bwd"):
        stub.require_backward()


def test_precompile_arguments():
    with pytest.raises(ValueError, match="exclude"):
        fsa_jit.precompile(arch="sm_80", detect=True)
    with pytest.raises(ValueError, match="say what to compile for"):
        fsa_jit.precompile()
    with pytest.raises(ValueError, match="dtype"):
        fsa_jit.precompile(arch="sm_80", dtypes=("fp8",))


def test_precompile_offline(lib, tmp_path):
    grid = dict(arch="sm_80", dtypes="bf16", head_dims=(32,), groups=(2,), block_sizes=(16, 48), top_k=4,
                cache_dir=str(tmp_path))
    first = precompile_or_skip(**grid)
    assert first["failed"] == 0, first["failures"]
    assert first["plans"] == 1 and first["skipped"] == 1  # block size 48 is not supported
    assert first["targets"] == ["sm_80"] and first["cache_dir"] == str(tmp_path)
    assert first["compiled"] + first["cached"] + first["in_memory"] > 0
    again = fsa_jit.precompile(**grid)
    assert again["compiled"] == 0 and again["plans"] == 1
    if first["compiled"]:
        assert any(tmp_path.rglob("*.cubin"))


def test_precompile_offline_compressed_and_window_plans(lib, tmp_path):
    grid = dict(arch="sm_80", dtypes="bf16", head_dims=(32,), groups=(2,), block_sizes=(16,), top_k=4,
                cache_dir=str(tmp_path), kinds="compressed,window", kernel_size=16, stride=16, window=64,
                value_dim=16)
    first = precompile_or_skip(**grid)
    assert first["failed"] == 0, first["failures"]
    assert first["plans"] == 2 and first["skipped"] == 0
    assert first["compiled"] + first["cached"] + first["in_memory"] > 0
    again = fsa_jit.precompile(**grid)
    assert again["compiled"] == 0 and again["plans"] == 2


def test_precompile_kind_arguments():
    with pytest.raises(ValueError, match="kinds"):
        fsa_jit.precompile(arch="sm_80", kinds="dense")
    with pytest.raises(ValueError, match="kinds"):
        fsa_jit.precompile(arch="sm_80", kinds="selected,kv-cache")
    with pytest.raises(ValueError, match="stride"):
        fsa_jit.precompile(arch="sm_80", kinds="compressed", stride=0)
    # The KV head counts tuning measures at mean nothing without tuning.
    with pytest.raises(ValueError, match="kv_heads applies only with tune"):
        fsa_jit.precompile(arch="sm_80", kv_heads=(8,))
    with pytest.raises(ValueError, match="kv_heads"):
        fsa_jit.precompile(detect=True, tune=True, kv_heads=(0,))
    with pytest.raises(ValueError, match="pass int32"):
        fsa_jit.precompile(detect=True, tune=True, groups=(1 << 16,), kv_heads=(1 << 16,))


def test_precompile_offline_kvcache_and_gate_plans(lib, tmp_path):
    grid = dict(arch="sm_90a", dtypes="bf16", head_dims=(32,), groups=(2,), block_sizes=(16,), top_k=4,
                cache_dir=str(tmp_path), kinds="kvcache,gate", page_sizes=(16, 48))
    first = precompile_or_skip(**grid)
    assert first["failed"] == 0, first["failures"]
    # kvcache at page 16 and the gate are made; page 48 is not a page size the library takes.
    assert first["plans"] == 2 and first["skipped"] == 1
    (shape, message), = first["skipped_shapes"]
    assert shape == "sm_90a bf16 kvcache d32 g2 bk16 k4 page48" and "page_size 48" in message
    assert first["compiled"] > 0 and any(tmp_path.rglob("*.cubin"))  # no other test makes these kernels
    # The paged cache's metadata check comes along, for servers that run in check mode without JIT.
    assert any(p.name.startswith("kvc_check.") for p in tmp_path.rglob("*.cubin"))
    again = fsa_jit.precompile(**grid)
    assert again["compiled"] == 0 and again["cached"] + again["in_memory"] > 0
    assert again["plans"] == 2 and again["skipped"] == 1


def test_precompile_grid_of_each_kind():
    from fsa_jit.precompile import _grid

    dims = dict(dtype_codes=[_lib.FSA_DTYPE_BF16], head_dims=[32, 64], groups=[1, 2], block_sizes=[16, 32],
                top_k=[4, 8], page_sizes=[16, 64], algorithm="auto", backward=False, kernel_size=32, stride=16,
                window=64)

    def count(kind, value_dim=0):
        return len(_grid([kind], value_dim=value_dim, **dims))

    n = {k: len(v) for k, v in dims.items() if isinstance(v, list)}
    assert count("kvcache") == n["head_dims"] * n["groups"] * n["block_sizes"] * n["top_k"] * n["page_sizes"]
    assert count("selected") == n["head_dims"] * n["groups"] * n["block_sizes"] * n["top_k"]
    assert count("window") == n["head_dims"] * n["groups"]
    assert count("gate") == n["head_dims"]
    assert count("gate", value_dim=16) == 1  # one value dim whatever the head dims


def test_precompile_page_size_arguments():
    with pytest.raises(ValueError, match="page_sizes applies to the kvcache kind"):
        fsa_jit.precompile(arch="sm_80", kinds="selected,gate", page_sizes=(16,))
    for bad in ((0,), ("64",), (True,), ()):
        with pytest.raises(ValueError, match="page_sizes"):
            fsa_jit.precompile(arch="sm_80", kinds="kvcache", page_sizes=bad)


def test_precompile_refuses_an_empty_target_or_dtype_list_by_name():
    with pytest.raises(ValueError, match="arch is empty"):
        fsa_jit.precompile(arch=[])
    with pytest.raises(ValueError, match="arch: empty target"):
        fsa_jit.precompile(arch="sm_80,")
    with pytest.raises(ValueError, match="dtypes is empty"):
        fsa_jit.precompile(arch="sm_80", dtypes=[])


@pytest.mark.parametrize("call,match", [
    (dict(arch=80), r"arch must be a string such as 'sm_80,sm_90a' or a list"),
    (dict(arch=["sm_80", 90]), r"arch must be a string"),
    (dict(detect=True, device="cuda:0"), r"device must be a CUDA device ordinal \(an int such as 0\), got 'cuda:0'"),
    (dict(arch="sm_80", cache_dir=123), r"cache_dir must be a path"),
])
def test_precompile_arguments_of_the_wrong_type_are_type_errors_naming_them(call, match):
    with pytest.raises(TypeError, match=match):
        fsa_jit.precompile(**call)


@pytest.mark.parametrize("call,match", [
    (dict(head_dims=(2**32 + 128,)), r"head_dims: 4294967424 is past int32"),
    (dict(groups=(2**31,)), r"groups: 2147483648 is past int32"),
    (dict(kinds="window", window=2**32 + 5), r"window: 4294967301 is past int32"),
    (dict(value_dim=2**32 + 64), r"value_dim: 4294967360 is past int32"),
])
def test_precompile_ints_past_int32_are_refused_rather_than_truncated(call, match):
    with pytest.raises(ValueError, match=match):
        fsa_jit.precompile(arch="sm_80", **call)


def test_precompile_takes_a_pathlib_cache_dir(lib, tmp_path):
    summary = fsa_jit.precompile(arch="sm_80", kinds="gate", dtypes="f16", head_dims=(32,), cache_dir=tmp_path, jobs=1)
    assert summary["cache_dir"] == str(tmp_path)


def test_precompile_bad_target(lib, tmp_path):
    with pytest.raises(fsa_jit.FsaError):
        fsa_jit.precompile(arch="sm_10", cache_dir=str(tmp_path))


def test_precompile_tunes_only_with_detect():
    with pytest.raises(ValueError, match="tune needs detect=True"):
        fsa_jit.precompile(arch="sm_80", tune=True)


class FakeTuningLibrary:
    """fsa_plan_tune recording its calls: buckets from 16 tokens on measure (smaller ones already have a
    record); failing_call (an index into the calls) returns FSA_STATUS_NO_DEVICE. fsa_plan_create records
    each plan's (num_kv_heads, num_q_heads); fsa_plan_destroy counts."""

    def __init__(self, failing_call=None):
        self.calls, self.failing_call = [], failing_call
        self.plans, self.destroyed = [], 0

    def fsa_plan_create(self, plan, ctx, desc):
        self.plans.append((desc._obj.num_kv_heads, desc._obj.num_q_heads))
        plan._obj.value = len(self.plans)
        return _lib.FSA_STATUS_OK

    def fsa_plan_destroy(self, plan):
        self.destroyed += 1

    def fsa_plan_tune(self, measured, plan, operation, tokens):
        self.calls.append((operation, tokens))
        if len(self.calls) - 1 == self.failing_call:
            return _lib.FSA_STATUS_NO_DEVICE
        measured._obj.value = int(tokens >= 16)
        return _lib.FSA_STATUS_OK

    def check(self, status, function):
        if status != _lib.FSA_STATUS_OK:
            raise _lib.FsaError(status, "FSA_STATUS_NO_DEVICE", "no device", function)


def test_tuning_measures_each_bucket_from_1_to_65536_tokens_forward_then_backward():
    from fsa_jit.precompile import TUNE_TOKENS, _tune_plan

    assert TUNE_TOKENS == (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536)
    desc = _lib.fsa_selected_attention_desc(num_q_heads=4, num_kv_heads=1)
    fake = FakeTuningLibrary()
    buckets, ms = _tune_plan(fake, None, desc, [1], backward=False)
    assert fake.calls == [(_lib.FSA_OPERATION_FORWARD, t) for t in TUNE_TOKENS] and buckets == 7 and ms >= 0
    assert fake.plans == [(1, 4)] and fake.destroyed == 1
    fake = FakeTuningLibrary()
    buckets, _ = _tune_plan(fake, None, desc, [1], backward=True)
    assert fake.calls == [(op, t) for t in TUNE_TOKENS for op in (_lib.FSA_OPERATION_FORWARD,
                                                                   _lib.FSA_OPERATION_BACKWARD)]
    assert buckets == 14


def test_tuning_measures_a_plan_at_each_kv_head_count_with_the_group_kept():
    # A record holds for its KV head count only: each count gets a plan of its own, group x count query heads.
    from fsa_jit.precompile import TUNE_TOKENS, _tune_plan

    desc = _lib.fsa_selected_attention_desc(num_q_heads=4, num_kv_heads=1)
    fake = FakeTuningLibrary()
    buckets, _ = _tune_plan(fake, None, desc, [2, 8], backward=False)
    assert fake.plans == [(2, 8), (8, 32)] and fake.destroyed == 2
    assert fake.calls == [(_lib.FSA_OPERATION_FORWARD, t) for t in TUNE_TOKENS] * 2 and buckets == 14
    assert (desc.num_kv_heads, desc.num_q_heads) == (1, 4)  # the grid's descriptor is left as it was


def test_tuning_stops_at_the_first_call_that_fails():
    from fsa_jit.precompile import _tune_plan

    fake = FakeTuningLibrary(failing_call=3)
    with pytest.raises(_lib.FsaError, match="fsa_plan_tune"):
        _tune_plan(fake, None, _lib.fsa_selected_attention_desc(num_q_heads=1, num_kv_heads=1), [1, 2],
                   backward=False)
    assert len(fake.calls) == 4 and fake.plans == [(1, 1)] and fake.destroyed == 1


def one_job(kind):
    """The grid point of the session's filled_cache (its kernels are on disk) for a kind."""
    from fsa_jit.precompile import _grid

    return _grid([kind], [_lib.FSA_DTYPE_F16], [32], 0, [1], [16], [4], [64], "auto", False, 32, 16, 64)[0]


def test_tuning_an_offline_plan_reaches_libfsa_and_is_reported_as_a_failure(lib, cache, capsys):
    import time

    from fsa_jit.precompile import _open_context, _plan_one, _print_outcome

    ctx = _open_context(lib, "sm_80", 0, str(cache))
    try:
        selected = _plan_one(lib, ctx, "sm_80", one_job("selected"), tune=True)
        gate = _plan_one(lib, ctx, "sm_80", one_job("gate"), tune=True)
    finally:
        lib.fsa_context_destroy(ctx)
    assert selected.kind == "ok" and selected.tuned is None and "NO_DEVICE" in selected.tune_error
    assert gate.kind == "ok" and gate.tuned is None and gate.tune_error is None  # only selected plans are tuned
    _print_outcome(selected, 1, 1, time.monotonic())
    out, err = capsys.readouterr()
    assert out.startswith("[1/1] sm_80 f16 d32 g1 bk16 k4: ready in ")
    assert err.startswith("  sm_80 f16 d32 g1 bk16 k4: tuning FAILED: fsa_plan_tune: FSA_STATUS_NO_DEVICE")


def test_a_plan_whose_tuning_fails_counts_as_failed_and_measured_buckets_add_up(lib, cache, monkeypatch):
    import importlib

    module = importlib.import_module("fsa_jit.precompile")  # fsa_jit.precompile is the function
    offline = module._open_context
    # No GPU here: the context of detect=True is an offline one, and the plans' outcomes are given.
    monkeypatch.setattr(module, "_open_context", lambda lib, target, device, where: offline(lib, "sm_80", 0, where))
    outcomes = {1: dict(tuned=(3, 1.0)), 2: dict(tuned=(4, 1.0)), 4: dict(tune_error="fsa_plan_tune: broken")}
    seen_tune, seen_heads = [], []

    def plan_one(lib, ctx, target_name, job, tune=False, kv_heads=(1,)):
        seen_tune.append(tune)
        seen_heads.append(list(kv_heads))
        group = job[4]
        return module._Outcome("ok", f"g{group}", "ready in 1.0 ms", **outcomes[group])

    monkeypatch.setattr(module, "_plan_one", plan_one)
    s = fsa_jit.precompile(detect=True, tune=True, groups=(1, 2, 4), cache_dir=str(cache), kv_heads=(2, 8))
    assert seen_tune == [True] * 3 and seen_heads == [[2, 8]] * 3
    assert (s["plans"], s["failed"], s["tuned"]) == (2, 1, 7)
    assert s["failures"] == [("g4", "tuning: fsa_plan_tune: broken")]


def test_an_fsa_error_survives_pickling_and_copying():
    # Its __init__ takes more than the message args holds, so unpickling and copy.copy raised TypeError
    # (an error passed back from a worker process or kept by a test framework was lost).
    import copy
    import pickle

    err = fsa_jit.FsaError(13, "FSA_STATUS_UNSUPPORTED", "no such kernel", "fsa_plan_create", {"stage": "plan"})
    err.removed = 2  # as a failed prune_cache sets it
    for again in (pickle.loads(pickle.dumps(err)), copy.copy(err), copy.deepcopy(err)):
        assert type(again) is fsa_jit.FsaError and str(again) == str(err) and again.removed == 2
        assert (again.status, again.name, again.message, again.function, again.info) == (
            13, "FSA_STATUS_UNSUPPORTED", "no such kernel", "fsa_plan_create", {"stage": "plan"})


def test_precompile_dedupes_a_large_grid_in_linear_time():
    # Each job was looked up in the list of those before it: 50,000 groups took about a minute.
    from fsa_jit.precompile import _grid

    t0 = time.monotonic()
    jobs = _grid(["selected", "selected"], [_lib.FSA_DTYPE_BF16], [128], 0, list(range(1, 50001)), [64], [16],
                 [64], "auto", False, 32, 16, 512)
    assert len(jobs) == 50000 and time.monotonic() - t0 < 2


def test_an_interrupt_stops_the_grid_and_frees_no_context_a_plan_still_uses(lib, tmp_path, monkeypatch):
    # Ctrl-C used to wait for every queued shape to compile; a second one then destroyed the contexts
    # under the plans still being made (a segfault: context.h forbids it).
    pc = importlib.import_module("fsa_jit.precompile")
    lock = threading.Lock()
    running, ran, running_at_destroy = [0], [], []

    def plan_one(lib_, ctx, target_name, job, tune=False, kv_heads=(1,)):
        with lock:
            running[0] += 1
        time.sleep(0.1)
        with lock:
            running[0] -= 1
            ran.append(job)
        return pc._Outcome("ok", target_name, "ready")

    def interrupt(*args):
        raise KeyboardInterrupt

    destroy = lib.fsa_context_destroy

    def destroy_counting_plans(ctx):
        with lock:
            running_at_destroy.append(running[0])
        destroy(ctx)

    monkeypatch.setattr(pc, "_plan_one", plan_one)
    monkeypatch.setattr(pc, "_print_outcome", interrupt)  # Ctrl-C after the first shape's line
    monkeypatch.setattr(lib, "fsa_context_destroy", destroy_counting_plans)
    with pytest.raises(KeyboardInterrupt):
        fsa_jit.precompile(arch="sm_80", groups=range(1, 41), jobs=2, verbose=True, cache_dir=str(tmp_path))
    assert len(ran) < 10, f"{len(ran)} of 40 shapes still ran after the interrupt"
    assert running_at_destroy == [0]  # destroyed once, after the plan still running had finished


def test_a_second_interrupt_while_plans_finish_leaves_the_contexts_undestroyed(lib, tmp_path, monkeypatch):
    # Freeing a context under a running plan crashes; leaking it until the process exits does not.
    pc = importlib.import_module("fsa_jit.precompile")
    release, destroyed = threading.Event(), []

    def plan_one(lib_, ctx, target_name, job, tune=False, kv_heads=(1,)):
        release.wait(10)
        return pc._Outcome("ok", target_name, "ready")

    def interrupted_wait(futures, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pc, "_plan_one", plan_one)
    monkeypatch.setattr(pc.concurrent.futures, "as_completed", interrupted_wait)
    monkeypatch.setattr(pc.concurrent.futures, "wait", interrupted_wait)
    monkeypatch.setattr(lib, "fsa_context_destroy", destroyed.append)
    try:
        with pytest.raises(KeyboardInterrupt):
            fsa_jit.precompile(arch="sm_80", groups=range(1, 5), jobs=2, cache_dir=str(tmp_path))
    finally:
        release.set()
    assert destroyed == []


def test_a_build_folders_link_to_a_missing_file_is_passed_over_not_an_error(monkeypatch, tmp_path):
    # A source tree with two build folders, one of them half rebuilt: its link names a file that is gone.
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "fsa.h").write_text("")
    (tmp_path / "python" / "fsa_jit").mkdir(parents=True)
    (tmp_path / "build-good").mkdir()
    (tmp_path / "build-good" / "libfsa.so").write_bytes(b"")
    (tmp_path / "build-old").mkdir()
    (tmp_path / "build-old" / "libfsa.so").symlink_to("libfsa.so.0.1.0")
    monkeypatch.setattr(_lib, "__file__", str(tmp_path / "python" / "fsa_jit" / "_lib.py"))
    paths = _lib.candidate_paths()
    assert str(tmp_path / "build-good" / "libfsa.so") in paths
    assert str(tmp_path / "build-old" / "libfsa.so") not in paths
