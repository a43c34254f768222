"""Shared fixtures. The tests exercise the package in this source tree
(python/ goes first on sys.path), whether or not it is also installed."""

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers import load_library_or_skip  # noqa: E402


@pytest.fixture
def lib():
    """The loaded libfsa, or skip."""
    return load_library_or_skip()


@pytest.fixture(scope="session")
def filled_cache(tmp_path_factory):
    """A disk cache holding the kernels of one small sm_80 shape, compiled once per session (NVRTC, no GPU);
    the tests that change a cache take a copy (`cache`). Skips without libfsa or NVRTC."""
    import fsa_jit

    load_library_or_skip()
    where = tmp_path_factory.mktemp("filled_cache")
    summary = fsa_jit.precompile(arch="sm_80", dtypes="f16", head_dims=(32,), groups=(1,), block_sizes=(16,),
                                 top_k=4, cache_dir=str(where))
    if summary["failed"] and "NO_NVRTC" in str(summary["failures"]):
        pytest.skip("NVRTC not available")
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
