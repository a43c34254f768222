"""Shared fixtures. The tests exercise the package in this source tree
(python/ goes first on sys.path), whether or not it is also installed."""

import importlib
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers import POISON_INT32, load_library_or_skip, precompile_or_skip  # noqa: E402

# The binding's modules that allocate the outputs they hand to libfsa (o, lse, topk, dq, dk, dv, the
# gates' gradients) with torch.empty.
OUTPUT_MODULES = ("attention", "_fast", "compressed", "window", "kvcache", "_gates", "_nsa_node")


@pytest.fixture
def lib():
    """The loaded libfsa, or skip."""
    return load_library_or_skip()


@pytest.fixture(scope="session")
def filled_cache(tmp_path_factory):
    """A disk cache holding the kernels of one small sm_80 shape, compiled once per session (NVRTC, no GPU);
    the tests that change a cache take a copy (`cache`). Skips without libfsa or NVRTC."""
    load_library_or_skip()
    where = tmp_path_factory.mktemp("filled_cache")
    summary = precompile_or_skip(arch="sm_80", dtypes="f16", head_dims=(32,), groups=(1,), block_sizes=(16,),
                                 top_k=4, cache_dir=str(where))
    assert summary["failed"] == 0, summary["failures"]
    # Kernels another test already loaded come from memory, and are written here all the same.
    assert len(list(where.rglob("*.cubin"))) >= 3
    return where


@pytest.fixture
def cache(filled_cache, tmp_path):
    """A copy of filled_cache that the test may change (copytree keeps the times prune goes by)."""
    copy = tmp_path / "cache"
    shutil.copytree(filled_cache, copy)
    return copy


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keeps each phase's report on the test item (rep_setup, rep_call, rep_teardown) for the fixtures."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, "rep_" + report.when, report)


class _PoisoningTorch:
    """torch as the binding's modules see it, except that torch.empty fills what it returns: floating
    tensors with NaN, int32 ones with POISON_INT32 (byte buffers, the workspaces, are left as they are).
    A kernel that skips some rows of an output then leaves NaN or an impossible block number there, not
    whatever the caching allocator's block held before (often an earlier call's identical result)."""

    def __init__(self, real, poisoned):
        self._real = real
        self._poisoned = poisoned

    def __getattr__(self, name):
        return getattr(self._real, name)

    def empty(self, *args, **kwargs):
        t = self._real.empty(*args, **kwargs)
        if t.numel() and t.is_floating_point():
            t.fill_(float("nan"))
            self._poisoned.append((t.dtype, tuple(t.shape)))
        elif t.numel() and t.dtype == self._real.int32:
            t.fill_(POISON_INT32)
            self._poisoned.append((t.dtype, tuple(t.shape)))
        return t


@pytest.fixture
def poisoned_outputs(request, monkeypatch):
    """Every output the binding allocates for libfsa to write starts as NaN (POISON_INT32 for int32)
    during the test; yields the list of (dtype, shape) poisoned. Eager calls only: torch.compile would
    trace the stand-in module. A test that passes without poisoning anything fails at teardown (the
    binding no longer allocates its outputs where this fixture reaches)."""
    import torch

    poisoned = []
    stand_in = _PoisoningTorch(torch, poisoned)
    for name in OUTPUT_MODULES:
        module = importlib.import_module(f"fsa_jit.{name}")
        assert module.torch is torch, f"fsa_jit.{name} no longer imports torch as `torch`"
        monkeypatch.setattr(module, "torch", stand_in)
    yield poisoned
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.passed and not poisoned:
        pytest.fail("no output of the binding was poisoned: it no longer allocates them with torch.empty in "
                    + ", ".join(OUTPUT_MODULES))
