"""fsa_jit: PyTorch binding of fsa-jit (libfsa), Native Sparse Attention's selected attention.

    import fsa_jit
    o = fsa_jit.selected_attention(q, k, v, topk_idx, cu_seqlens, block_size=64)

libfsa is found through $FSA_LIBRARY, inside this package (a wheel carries
it), on the system library path, or in a build folder of the source tree; it
is loaded on first use. torch is imported on first use of the attention too,
so precompile() works without it.
"""

from ._lib import FSA_DEVICE_NONE, FsaError, FsaLibraryNotFound
from .precompile import precompile

try:
    from ._version import __version__  # written by the wheel build from VERSION
except ImportError:  # the source tree: read VERSION itself
    from ._lib import source_tree_version as _source_tree_version

    __version__ = _source_tree_version()

__all__ = [
    "FSA_DEVICE_NONE",
    "FsaError",
    "FsaLibraryNotFound",
    "cached_plans",
    "clear_plans",
    "has_backward",
    "library_path",
    "library_version",
    "precompile",
    "reference",
    "selected_attention",
]


def library_path():
    """Path of the loaded libfsa (loads it if needed)."""
    from . import _lib

    return _lib.get().path


def library_version():
    """libfsa's version string, e.g. '0.1.0'."""
    from . import _lib

    return _lib.get().version()


def has_backward():
    """Whether the loaded libfsa has the backward entry points."""
    from . import _lib

    return _lib.get().has_backward


_LAZY = {"selected_attention", "clear_plans", "cached_plans"}


def __getattr__(name):
    # torch is imported only when the attention is first used.
    if name in _LAZY:
        from . import attention

        return getattr(attention, name)
    if name == "reference":
        import importlib

        return importlib.import_module(".reference", __name__)
    raise AttributeError(f"module 'fsa_jit' has no attribute {name!r}")
