"""Shared fixtures. The tests exercise the package in this source tree
(python/ goes first on sys.path), whether or not it is also installed."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers import load_library_or_skip  # noqa: E402


@pytest.fixture
def lib():
    """The loaded libfsa, or skip."""
    return load_library_or_skip()
