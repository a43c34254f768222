"""fsa_jit: PyTorch binding of fsa-jit (libfsa), Native Sparse Attention's selected attention.

    import fsa_jit
    o = fsa_jit.selected_attention(q, k, v, topk_idx, cu_seqlens, block_size=64)

The other branches of Native Sparse Attention: fsa_jit.compressed_attention
(with the top-k block selection), fsa_jit.window_attention, and the whole
layer with the caller's gates in fsa_jit.nsa (nsa_attention, NSAttention).

libfsa is found through $FSA_LIBRARY, inside this package (a wheel carries
it), on the system library path, or in a build folder of the source tree; it
is loaded on first use. torch is imported on first use of the attention too,
so precompile() and the disk cache's maintenance (cache_entries, verify_cache,
prune_cache) work without it.
"""

from ._lib import FSA_DEVICE_NONE, FsaError, FsaLibraryNotFound
from .cache import CacheEntry, cache_entries, prune_cache, verify_cache
from .precompile import precompile

try:
    from ._version import __version__  # written by the wheel build from VERSION
except ImportError:  # the source tree: read VERSION itself
    from ._lib import source_tree_version as _source_tree_version

    __version__ = _source_tree_version()

__all__ = [
    "CacheEntry",
    "FSA_DEVICE_NONE",
    "FsaError",
    "FsaLibraryNotFound",
    "cache_entries",
    "cached_plans",
    "clear_plans",
    "compressed_attention",
    "has_backward",
    "library_path",
    "library_version",
    "nsa_attention",
    "plan_choice",
    "precompile",
    "prune_cache",
    "reference",
    "register_operators",
    "selected_attention",
    "set_tuning",
    "verify_cache",
    "window_attention",
]


def library_path():
    """Path of the loaded libfsa (loads it if needed)."""
    from . import _lib

    return _lib.get().path


def library_version():
    """libfsa's version string (major.minor.patch, the VERSION file's)."""
    from . import _lib

    return _lib.get().version()


def has_backward():
    """Whether the loaded libfsa has the backward entry points."""
    from . import _lib

    return _lib.get().has_backward


_LAZY = {"selected_attention": "attention", "cached_plans": "attention", "plan_choice": "attention",
         "set_tuning": "attention", "compressed_attention": "compressed", "window_attention": "window",
         "nsa_attention": "nsa"}
_SUBMODULES = {"attention", "compressed", "window", "nsa", "kvcache", "reference"}


def register_operators():
    """Registers every torch.ops.fsa_jit operator (imports torch). The functions above register theirs on
    first use; code that reaches the operators another way (a graph loaded with torch.export.load, a
    direct torch.ops.fsa_jit call) calls this first."""
    from . import attention, compressed, kvcache, nsa, window  # noqa: F401 (each registers its operators)


def clear_plans():
    """Destroys every cached plan of the attention operators (contexts stay); later calls create them again.
    A captured CUDA graph that used one of them must not be replayed afterwards, and no other thread may be
    inside a call of the operators meanwhile (a plan is destroyed at once, not after the calls using it)."""
    from . import attention, compressed, kvcache, nsa, window

    attention.clear_plans()
    compressed.clear_plans()
    window.clear_plans()
    nsa.clear_plans()
    kvcache.clear_plans()


def __getattr__(name):
    # torch is imported only when the attention is first used.
    import importlib

    if name in _LAZY:
        value = getattr(importlib.import_module("." + _LAZY[name], __name__), name)
        globals()[name] = value  # later lookups skip this function: it cost microseconds per call
        return value
    if name in _SUBMODULES:
        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module 'fsa_jit' has no attribute {name!r}")
