"""The disk kernel cache: list, verify and prune it, as fsa-precompile --list, --verify and --prune do.

Each function opens a context only to reach the cache directory (an offline target unless detect=True),
calls libfsa, copies what libfsa reports into Python objects and destroys the context before it returns:
the results belong to the caller, nothing is left to free, and no string of libfsa's outlives the call.
Needs no torch and, without detect, no GPU.
"""

import ctypes
import os
from typing import NamedTuple, Optional

from . import _lib
from .precompile import _cache_dir_bytes, _device_ordinal, _disk_cache_dir, _no_nul, _open_context

# Any target reaches the same directory, and every target's entries are visited.
DEFAULT_TARGET = "sm_80"


class CacheEntry(NamedTuple):
    """One entry file of the disk cache, copied from libfsa's fsa_cache_entry_info."""

    path: str  # full path
    name: str  # readable name: a kernel's (sel_fwd_main_bf16_d128_dv128_g4_bk64) or a tuning record's (tune_fwd_...)
    target: str  # the directory's target, e.g. sm_90a
    bytes: int  # file size
    mtime: int  # seconds since the epoch
    valid: Optional[bool] = None  # verify_cache only: header, key and checksum are good
    deleted: Optional[bool] = None  # verify_cache only: a bad entry was deleted (False: the cache did not allow it)
    loaded: Optional[bool] = None  # verify_cache only: a valid entry was also loaded on the GPU (False: disk only)
    record: bool = False  # a tuning record (checked on disk only, never loaded), not a kernel


def _with_cache(arch, detect, device, cache_dir, use):
    """use(lib, ctx, cache_dir) on a context of the cache; its result with "cache_dir" added."""
    if arch is not None and detect:
        raise ValueError("arch and detect exclude each other")
    if arch is not None and not isinstance(arch, str):
        raise TypeError(f"arch must be one target such as 'sm_80' (a string), got {arch!r}")
    if arch is not None:
        _no_nul("arch", arch)
    if detect:
        _device_ordinal(device)
    _cache_dir_bytes(cache_dir)  # a TypeError before anything is loaded
    # A context creates its cache directory: a mistyped cache_dir would become an empty cache.
    if cache_dir and not os.path.isdir(cache_dir):
        raise RuntimeError(f"cache_dir {os.fsdecode(cache_dir)}: "
                           f"{'not a directory' if os.path.exists(cache_dir) else 'no such directory'}")
    lib = _lib.get()
    ctx = _open_context(lib, None if detect else arch or DEFAULT_TARGET, device, cache_dir)
    try:
        where = _disk_cache_dir(lib, ctx)
        return {"cache_dir": where, **use(lib, ctx, where)}
    finally:
        lib.fsa_context_destroy(ctx)


class _Collector:
    """The visit callback: copies each entry while libfsa's strings are valid (during the callback only)."""

    def __init__(self, verified):
        self.verified = verified
        self.entries = []
        self.error = None
        self.callback = _lib.fsa_cache_visit_fn(self._visit)  # referenced by self for the whole call

    def _visit(self, info, _user):
        # An exception cannot cross libfsa's frames: keep it, stop the walk (non-zero), raise it afterwards.
        try:
            e = info.contents
            self.entries.append(CacheEntry(
                os.fsdecode(e.path), _lib._text(e.name), _lib._text(e.target), e.bytes, e.mtime,
                bool(e.valid) if self.verified else None, bool(e.deleted) if self.verified else None,
                bool(e.loaded) if self.verified else None, bool(e.record)))
            return 0
        except BaseException as exc:  # noqa: BLE001 (re-raised by raise_if_failed)
            self.error = exc
            return 1

    def raise_if_failed(self):
        if self.error is not None:
            raise self.error


def cache_entries(cache_dir=None, arch=None, detect=False, device=0):
    """Every entry (kernels and tuning records) of every target in the disk cache, reading the file system only.

    cache_dir: None or "" for the default ($FSA_CACHE_DIR, else $XDG_CACHE_HOME/fsa, else ~/.cache/fsa).
    arch: the one offline target of the context that reaches the cache (default sm_80; it does not limit
    the listing), or detect=True for the GPU `device`. Returns a dict: cache_dir, entries (list of
    CacheEntry, valid, deleted and loaded None), bytes (their total). FsaError when libfsa refuses the target or
    cannot read the cache; RuntimeError when there is no usable cache directory or cache_dir is given and is not
    an existing directory.
    """

    def use(lib, ctx, _where):
        c = _Collector(verified=False)
        st = lib.fsa_cache_list(ctx, c.callback, None)
        c.raise_if_failed()
        lib.check(st, "fsa_cache_list")
        return {"entries": c.entries, "bytes": sum(e.bytes for e in c.entries)}

    return _with_cache(arch, detect, device, cache_dir, use)


def verify_cache(cache_dir=None, arch=None, detect=False, device=0):
    """Re-reads and re-hashes every entry (kernels and tuning records) and deletes the bad ones where the
    cache allows it; with detect=True also loads the kernels of the GPU's target into the driver (only a load error that
    condemns the image makes an entry bad). Entries of another library version's format are skipped;
    access times are kept (prune ranks by them).

    Arguments as cache_entries. Returns a dict: cache_dir, entries (list of CacheEntry with valid,
    deleted and loaded set), bad (entries found bad), deleted (bad entries deleted), loaded (valid entries
    also loaded on the GPU: with detect=True those of its target that loaded), target (the context's
    target: the GPU's with detect=True), bytes (total of the entries checked). Errors as cache_entries.
    """

    def use(lib, ctx, _where):
        c = _Collector(verified=True)
        bad = ctypes.c_uint64()
        st = lib.fsa_cache_verify(ctx, c.callback, None, ctypes.byref(bad))
        c.raise_if_failed()
        lib.check(st, "fsa_cache_verify")
        return {"entries": c.entries, "bad": bad.value, "deleted": sum(bool(e.deleted) for e in c.entries),
                "loaded": sum(bool(e.loaded) for e in c.entries), "target": _lib._text(lib.fsa_context_target(ctx)),
                "bytes": sum(e.bytes for e in c.entries)}

    return _with_cache(arch, detect, device, cache_dir, use)


def prune_cache(max_bytes, cache_dir=None, arch=None, detect=False, device=0):
    """Deletes stale temporary and lock files, then the least recently used entries until the entries
    and the live writers' temporary files total at most max_bytes. Safe while other processes use the cache (one that needs a deleted kernel
    compiles it again).

    max_bytes: an int >= 0 or a string such as "500M" or "2G" (suffixes K, M, G, T: powers of 1024); 0
    deletes every entry. Other arguments as cache_entries. Returns a dict: cache_dir, removed (files
    deleted), bytes_left (bytes left: entries and live writers' temporary files). Errors as cache_entries, and ValueError or TypeError for
    a max_bytes that is not a byte count. A file that cannot be deleted does not stop the others: the
    FsaError raised afterwards has cache_dir, removed and bytes_left attributes saying what was done
    (bytes_left None when a directory could not be read, so the size left is unknown).
    """
    if max_bytes is None:  # parse_bytes reads None as 0, which here would delete every entry
        raise TypeError("max_bytes must be an int or a string such as '2G', got None")
    limit = _lib.parse_bytes(max_bytes, "max_bytes")
    if limit >= 1 << 64:
        raise ValueError(f"max_bytes: {max_bytes!r} is more than a uint64_t holds")

    def use(lib, ctx, where):
        removed, left = ctypes.c_uint64(), ctypes.c_uint64()
        st = lib.fsa_cache_prune(ctx, limit, ctypes.byref(removed), ctypes.byref(left))
        if st != _lib.FSA_STATUS_OK:
            e = lib.error(st, "fsa_cache_prune")
            # UINT64_MAX: a directory could not be read, so what is left is unknown.
            e.cache_dir, e.removed = where, removed.value
            e.bytes_left = None if left.value == (1 << 64) - 1 else left.value
            raise e
        return {"removed": removed.value, "bytes_left": left.value}

    return _with_cache(arch, detect, device, cache_dir, use)
