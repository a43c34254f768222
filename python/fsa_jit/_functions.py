"""The signatures of include/fsa.h's functions and Library, which declares them on a loaded libfsa and
turns its statuses into FsaError. Finding and loading the library stays in _lib (the tests patch it there).
"""

import ctypes

from ._constants import FSA_STATUS_OK
from ._errors import FsaError, FsaLibraryNotFound
from ._structs import (
    fsa_bwd_args,
    fsa_cache_stats,
    fsa_cache_visit_fn,
    fsa_context_options,
    fsa_error_info,
    fsa_fwd_args,
    fsa_plan_choice,
    fsa_selected_attention_desc,
)

# --------------------------------------------------------------- functions

_c = ctypes
_P = ctypes.POINTER
_status = ctypes.c_int
_vp = ctypes.c_void_p  # fsa_context *, fsa_plan *, streams

# name -> (restype, argtypes)
REQUIRED_FUNCTIONS = {
    "fsa_status_name": (_c.c_char_p, [_c.c_int]),
    "fsa_status_string": (_c.c_char_p, [_c.c_int]),
    "fsa_last_error": (_c.c_char_p, []),
    "fsa_last_error_info": (_P(fsa_error_info), []),
    "fsa_version_string": (_c.c_char_p, []),
    "fsa_context_create": (_status, [_P(_vp), _P(fsa_context_options)]),
    "fsa_context_destroy": (None, [_vp]),
    "fsa_context_target": (_c.c_char_p, [_vp]),
    "fsa_context_cache_dir": (_c.c_char_p, [_vp]),
    "fsa_context_cache_stats": (_status, [_P(fsa_cache_stats), _vp]),
    "fsa_cache_list": (_status, [_vp, fsa_cache_visit_fn, _vp]),
    "fsa_cache_verify": (_status, [_vp, fsa_cache_visit_fn, _vp, _P(_c.c_uint64)]),
    "fsa_cache_prune": (_status, [_vp, _c.c_uint64, _P(_c.c_uint64), _P(_c.c_uint64)]),
    "fsa_fill_u32": (_status, [_vp, _c.c_uint64, _c.c_uint32, _c.c_uint64, _vp]),
    "fsa_plan_create": (_status, [_P(_vp), _vp, _P(fsa_selected_attention_desc)]),
    "fsa_plan_destroy": (None, [_vp]),
    "fsa_plan_workspace_size": (_status, [_P(_c.c_size_t), _vp, _c.c_int64, _c.c_int]),
    "fsa_plan_algorithm": (_status, [_P(_c.c_int), _P(_c.c_char_p), _vp, _c.c_int64]),
    "fsa_selected_attention_fwd": (_status, [_vp, _P(fsa_fwd_args), _vp]),
}

# Backward: newer than the rest; a library without it still loads, and only
# a backward call fails (see Library.require_backward).
OPTIONAL_FUNCTIONS = {
    "fsa_plan_workspace_size_bwd": (_status, [_P(_c.c_size_t), _vp, _c.c_int64, _c.c_int]),
    "fsa_selected_attention_bwd": (_status, [_vp, _P(fsa_bwd_args), _vp]),
    "fsa_plan_choice_get": (_status, [_P(fsa_plan_choice), _vp, _c.c_int, _c.c_int64]),
    "fsa_plan_tune": (_status, [_P(_c.c_int), _vp, _c.c_int, _c.c_int64]),
}

# ----------------------------------------------------------------- Library


def _text(b):
    return b.decode("utf-8", "replace") if b else ""


class Library:
    """A loaded libfsa with every function's signature declared."""

    def __init__(self, cdll, path):
        self.cdll = cdll
        self.path = path
        missing = []
        for name, (restype, argtypes) in REQUIRED_FUNCTIONS.items():
            try:
                fn = getattr(cdll, name)
            except AttributeError:
                missing.append(name)
                continue
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)
        if missing:
            raise FsaLibraryNotFound(f"{path} is not a usable libfsa: missing {', '.join(missing)}")
        for name, (restype, argtypes) in OPTIONAL_FUNCTIONS.items():
            fn = getattr(cdll, name, None)
            if fn is not None:
                fn.restype = restype
                fn.argtypes = argtypes
            setattr(self, name, fn)

    @property
    def has_backward(self):
        return self.fsa_selected_attention_bwd is not None and self.fsa_plan_workspace_size_bwd is not None

    def require_backward(self):
        if not self.has_backward:
            raise RuntimeError(
                f"{self.path} has no fsa_selected_attention_bwd / fsa_plan_workspace_size_bwd: this "
                "build of libfsa only runs the forward; rebuild it from a version with the backward"
            )

    def version(self):
        return _text(self.fsa_version_string())

    def status_name(self, status):
        return _text(self.fsa_status_name(status))

    def error(self, status, function=None):
        """FsaError for `status`; call right after the failing call (the record is per thread)."""
        info = {}
        p = self.fsa_last_error_info()
        if p:
            e = p.contents
            info = {f: _text(getattr(e, f)) for f in ("stage", "kernel", "key", "target", "message", "log")}
            info["status"] = e.status
        return FsaError(status, self.status_name(status), _text(self.fsa_last_error()), function, info)

    def check(self, status, function=None):
        if status != FSA_STATUS_OK:
            raise self.error(status, function)
