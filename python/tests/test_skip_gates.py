"""What may skip a test, on the CPU and without torch: with FSA_TEST_REQUIRE_GPU set (the GPU machine's runs),
the GPU tests' gates (no CUDA device, no libfsa, a libfsa without an entry point they need) fail instead of
skipping, so a loader or detection bug cannot turn the GPU suite into skips that pass; unset, they skip as on
a CPU-only machine. The offline precompile tests skip only where NVRTC is missing (FSA_STATUS_NO_NVRTC)."""

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

import fsa_jit
import helpers
from fsa_jit import _lib

HERE = Path(__file__).resolve().parent


@pytest.fixture(params=["unset", "", "0", "1"])
def require(request, monkeypatch):
    """FSA_TEST_REQUIRE_GPU unset, empty, 0 or 1; the value (None when unset)."""
    if request.param == "unset":
        monkeypatch.delenv("FSA_TEST_REQUIRE_GPU", raising=False)
        return None
    monkeypatch.setenv("FSA_TEST_REQUIRE_GPU", request.param)
    return request.param


def expect_skip_or_fail(require, call, reason):
    """call() skips with `reason` in its message, or fails with it when FSA_TEST_REQUIRE_GPU is 1."""
    wanted = pytest.fail.Exception if require == "1" else pytest.skip.Exception
    with pytest.raises(wanted) as e:
        call()
    assert reason in e.value.msg
    assert ("FSA_TEST_REQUIRE_GPU=1" in e.value.msg) == (require == "1")


def test_only_a_value_other_than_empty_and_0_requires_a_gpu(require):
    assert helpers.gpu_required() == (require == "1")


@pytest.mark.parametrize("value, required", [("true", True), ("ON", True), ("yes", True), ("false", False),
                                             ("off", False), ("No", False)])
def test_the_switch_words_read_as_the_c_tests_read_them(value, required, monkeypatch):
    # "false" read as on made a machine without a GPU fail the suite it meant to skip.
    monkeypatch.setenv("FSA_TEST_REQUIRE_GPU", value)
    assert helpers.gpu_required() == required


def test_a_malformed_value_is_an_error_not_a_guess(monkeypatch):
    monkeypatch.setenv("FSA_TEST_REQUIRE_GPU", "maybe")
    with pytest.raises(pytest.UsageError, match="FSA_TEST_REQUIRE_GPU=maybe"):
        helpers.gpu_required()


def test_no_libfsa_skips_or_fails(require, monkeypatch):
    def not_found():
        raise _lib.FsaLibraryNotFound("libfsa.so: cannot open shared object file")

    monkeypatch.setattr(_lib, "get", not_found)
    expect_skip_or_fail(require, helpers.load_library_or_skip, "libfsa not available: libfsa.so: cannot open")


def test_a_libfsa_without_the_backward_skips_or_fails(require, monkeypatch):
    monkeypatch.setattr(_lib, "get", lambda: types.SimpleNamespace(has_backward=False, path="/x/libfsa.so"))
    assert helpers.load_library_or_skip().path == "/x/libfsa.so"
    expect_skip_or_fail(require, lambda: helpers.load_library_or_skip(backward=True),
                        "/x/libfsa.so has no backward entry points")


def test_no_cuda_device_skips_or_fails(require, monkeypatch):
    cpu_only = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: False))
    monkeypatch.setitem(sys.modules, "torch", cpu_only)
    expect_skip_or_fail(require, helpers.cuda_torch_or_skip, "no CUDA device")
    with_cuda = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: True))
    monkeypatch.setitem(sys.modules, "torch", with_cuda)
    assert helpers.cuda_torch_or_skip() is with_cuda


def test_no_torch_skips_or_fails(require, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    expect_skip_or_fail(require, helpers.cuda_torch_or_skip, "torch not available")


@pytest.mark.parametrize("require_gpu", ["", "1"])
def test_a_gpu_test_module_fails_to_collect_under_require_gpu(require_gpu):
    """test_kvcache.py (a GPU module) in a pytest of its own that sees no CUDA device: skipped, or with
    FSA_TEST_REQUIRE_GPU=1 an error that fails the run."""
    env = dict(os.environ, FSA_TEST_REQUIRE_GPU=require_gpu, CUDA_VISIBLE_DEVICES="")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          str(HERE / "test_kvcache.py")], cwd=HERE.parent, env=env, capture_output=True, text=True,
                         timeout=300)
    out = run.stdout + run.stderr
    if require_gpu:
        assert run.returncode not in (0, 5), out
        assert "FSA_TEST_REQUIRE_GPU=1 says the GPU tests run here" in out and "1 error" in out, out
    else:
        assert run.returncode in (0, 5) and "1 skipped" in out, out  # 5: a module-level skip collects no test


def refused(**grid):
    raise fsa_jit.FsaError(_lib.FSA_STATUS_INVALID_ARGUMENT, "FSA_STATUS_INVALID_ARGUMENT", "target refused",
                           "fsa_context_create")


def test_precompile_errors_other_than_no_nvrtc_fail_the_offline_tests(monkeypatch, tmp_path):
    import test_lib

    monkeypatch.setattr(fsa_jit, "precompile", refused)
    for test in (test_lib.test_precompile_offline, test_lib.test_precompile_offline_compressed_and_window_plans,
                 test_lib.test_precompile_offline_kvcache_and_gate_plans):
        try:
            with pytest.raises(fsa_jit.FsaError, match="target refused"):
                test(None, tmp_path)
        except pytest.skip.Exception as e:  # a skip would pass this test as skipped: fail it
            pytest.fail(f"{test.__name__} skipped on a refused target: {e.msg}")


def test_precompile_skips_only_without_nvrtc(monkeypatch):
    def no_nvrtc(**grid):
        raise fsa_jit.FsaError(_lib.FSA_STATUS_NO_NVRTC, "FSA_STATUS_NO_NVRTC", "libnvrtc not found", "fsa_compile")

    monkeypatch.setattr(fsa_jit, "precompile", no_nvrtc)
    with pytest.raises(pytest.skip.Exception, match="NVRTC not available"):
        helpers.precompile_or_skip(arch="sm_80")

    def summary(*messages):
        failures = [(f"shape {i}", m) for i, m in enumerate(messages)]
        return lambda **grid: {"failed": len(failures), "failures": failures}

    monkeypatch.setattr(fsa_jit, "precompile", summary("FSA_STATUS_NO_NVRTC: libnvrtc not found"))
    with pytest.raises(pytest.skip.Exception, match="NVRTC not available"):
        helpers.precompile_or_skip(arch="sm_80")
    # One shape failing for another reason: the summary comes back, for the test's own assert to fail.
    monkeypatch.setattr(fsa_jit, "precompile", summary("FSA_STATUS_NO_NVRTC: x", "FSA_STATUS_COMPILE_ERROR: y"))
    assert helpers.precompile_or_skip(arch="sm_80")["failed"] == 2
