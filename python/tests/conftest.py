"""Shared fixtures. The tests exercise the package in this source tree
(python/ goes first on sys.path), whether or not it is also installed."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@pytest.fixture
def lib():
    """The loaded libfsa, or skip."""
    from fsa_jit import _lib

    try:
        return _lib.get()
    except _lib.FsaLibraryNotFound as e:
        pytest.skip(f"libfsa not available: {str(e).splitlines()[0]}")
