"""precompile: fills the kernel cache ahead of time, like tools/fsa-precompile.

A shape is precompiled by creating (and destroying) a plan for it, so the
cache ends up holding exactly what a later plan creation looks up. Needs no
torch and, with `arch`, no GPU.

A package so that `python -m fsa_jit.precompile` runs its __main__: as a
plain module, which fsa_jit imports first, runpy warned that it ran it twice.
"""

import collections
import concurrent.futures
import ctypes
import itertools
import numbers
import os
import sys
import threading
import time

from .. import _kvcache_abi
from .. import _lib
from .. import _nsa_abi


def _dtype_code(d):
    return _lib.dtype_code(d)


def _int_list(name, values):
    if isinstance(values, int):
        values = (values,)
    out = []
    for x in values:
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            raise ValueError(f"{name}: {x!r} is not a positive int")
        if x > _lib.INT32_MAX:  # the descriptors' int fields (libfsa reports its own limits below that)
            raise ValueError(f"{name}: {x} is past int32 (at most {_lib.INT32_MAX})")
        if x not in out:
            out.append(x)
    if not out:
        raise ValueError(f"{name} is empty")
    return out


def _targets(arch):
    if isinstance(arch, str):
        arch = arch.split(",")
    if not isinstance(arch, (list, tuple)) or not all(isinstance(a, str) for a in arch):
        raise TypeError(f"arch must be a string such as 'sm_80,sm_90a' or a list of such names, got {arch!r}")
    out = []
    for a in arch:
        a = a.strip()
        if not a:
            raise ValueError(f"arch: empty target in {arch!r}")
        _no_nul("arch", a)
        if a not in out:
            out.append(a)
    if not out:
        raise ValueError("arch is empty: name at least one target, e.g. 'sm_80'")
    return out


def _device_ordinal(device):
    """device as fsa_context_options.device takes it: a CUDA device ordinal (an int, as --device N)."""
    if isinstance(device, bool) or not isinstance(device, numbers.Integral):
        raise TypeError(f"device must be a CUDA device ordinal (an int such as 0), got {device!r}")
    _lib.require_int("device", device, 0)
    return int(device)


def _no_nul(name, text):
    """libfsa reads a C string up to its first NUL: "/a\\0/b" would be the directory /a, "sm_80\\0x" the target
    sm_80. Refused, as Python's own path functions refuse them (ValueError)."""
    if ("\0" if isinstance(text, str) else b"\0") in text:
        raise ValueError(f"{name} {text!r} has a NUL character; libfsa would read it cut short there")


def _cache_dir_bytes(cache_dir):
    """cache_dir (None, a str, bytes or os.PathLike) as the C string libfsa takes."""
    if cache_dir is None:
        return None
    if not isinstance(cache_dir, (str, bytes, os.PathLike)):
        raise TypeError(f"cache_dir must be a path (str, bytes or os.PathLike) or None, got {type(cache_dir).__name__}")
    path = os.fsencode(cache_dir)
    _no_nul("cache_dir", path)
    return path


def _open_context(lib, target, device, cache_dir):
    """A context of the tool's settings for an offline `target` (None: the GPU `device`), whose disk cache
    is `cache_dir` (None or "": the default). The caller destroys it (fsa_context_destroy). FsaError when
    libfsa refuses the target or device."""
    options = _lib.fsa_context_options(
        device=_lib.FSA_DEVICE_NONE if target is not None else device,
        # As the command line gave it: an argument that is not UTF-8 comes with surrogates, which encode()
        # refused (a UnicodeEncodeError, fsa-precompile's usage error) where libfsa names the bad target.
        target=os.fsencode(target) if target is not None else None,
        cache_dir=_cache_dir_bytes(cache_dir),
        # The environment's FSA_CACHE_MODE and FSA_JIT are for applications; the tool compiles and writes
        # (verifying also deletes bad entries).
        cache_mode=_lib.FSA_CACHE_MODE_READ_WRITE,
        jit=_lib.FSA_JIT_ON,
        log=1,  # an unusable cache directory must not pass silently
        # As the C tool: the check-mode kernels and the variants tuning can measure are compiled too, for
        # processes that run with FSA_CHECK=1 or FSA_TUNE=on and FSA_JIT=off; nothing is checked, and
        # nothing is measured unless precompile(tune=True) asks (fsa_plan_tune needs tuning on).
        check=1,
        tune=_lib.FSA_TUNE_ON,
    )
    ctx = ctypes.c_void_p()
    lib.check(lib.fsa_context_create(ctypes.byref(ctx), ctypes.byref(options)), "fsa_context_create")
    return ctx


def _disk_cache_dir(lib, ctx):
    """The context's cache directory; RuntimeError when it has none (precompiling or maintaining without
    a disk cache would do nothing)."""
    where = _lib._text(lib.fsa_context_cache_dir(ctx))
    if not where:
        raise RuntimeError(f"{_lib._text(lib.fsa_context_target(ctx))}: no usable cache directory (see the "
                           "warning above); nothing would be kept")
    return where


def _stats(lib, ctx):
    s = _lib.fsa_cache_stats()
    lib.check(lib.fsa_context_cache_stats(ctypes.byref(s), ctx), "fsa_context_cache_stats")
    return s


KINDS = ("selected", "compressed", "window", "kvcache", "gate")
PAGE_SIZES = (64,)  # the default of page_sizes


def _desc_of(job):
    """(family, descriptor, shape text) of one plan of the grid; family names its fsa_<family>_plan_create /
    _destroy, None for the selected kind (the core library's fsa_plan_create)."""
    (kind, dtype, d, dv, g, bk, k, page, algorithm, backward, kernel_size, stride, window) = job
    dims = f"d{d}" + (f"/dv{dv}" if dv else "")
    if kind == "kvcache":
        # Batch and token counts only size the plan's workspace, not its kernels.
        desc = _kvcache_abi.fsa_kvcache_desc(dtype=dtype, head_dim=d, value_dim=dv, num_q_heads=g, num_kv_heads=1,
                                             block_size=bk, top_k=k, page_size=page, max_batch=1,
                                             max_query_tokens=1)
        return "kvcache", desc, f"kvcache {dims} g{g} bk{bk} k{k} page{page}"
    if kind == "gate":
        return "gate", _nsa_abi.fsa_gate_desc(dtype=dtype, value_dim=dv), f"gate dv{dv}"
    if kind == "compressed":
        desc = _nsa_abi.fsa_compressed_attention_desc(
            dtype=dtype, head_dim=d, value_dim=dv, num_q_heads=g, num_kv_heads=1, kernel_size=kernel_size,
            stride=stride, top_k=k, block_size=bk, init_blocks=1, local_blocks=2, backward=int(bool(backward)))
        return "compressed", desc, f"compressed {dims} g{g} l{kernel_size} s{stride} bk{bk} k{k}"
    if kind == "window":
        desc = _nsa_abi.fsa_window_attention_desc(dtype=dtype, head_dim=d, value_dim=dv, num_q_heads=g,
                                                  num_kv_heads=1, window=window, backward=int(bool(backward)))
        return "window", desc, f"window {dims} g{g} w{window}"
    desc = _lib.fsa_selected_attention_desc(
        dtype=dtype, head_dim=d, num_q_heads=g, num_kv_heads=1, block_size=bk, top_k=k,
        algorithm=_lib.ALGORITHMS[algorithm], backward=int(bool(backward)),
    )
    if dv:
        desc.value_dim = dv
    return None, desc, f"{dims} g{g} bk{bk} k{k}"


# What one point of the grid came to: kind is ok, skipped or failed; detail the time or the reason; with
# tuning, tuned is (buckets measured, ms) or tune_error the message of the call that failed.
_Outcome = collections.namedtuple("_Outcome", "kind shape detail tuned tune_error", defaults=(None, None))

TUNE_TOKENS = tuple(4 ** i for i in range(9))  # 1, 4, ..., 65536: the buckets tune=True measures
_gpu = threading.Lock()  # one plan measures at a time: timings of plans sharing the GPU would mislead


def _tune_plan(lib, ctx, desc, kv_heads, backward):
    """Measures the selected-attention plan of `desc` (one KV head) at each KV head count of kv_heads
    (num_q_heads the group times it: a record holds for its count only), at every token count of
    TUNE_TOKENS (forward, then backward when the plan has it), as fsa-precompile --tune; (buckets
    measured, ms). FsaError from the first call that fails. A bucket that already has a tuning record is
    not measured again."""
    operations = (_lib.FSA_OPERATION_FORWARD, _lib.FSA_OPERATION_BACKWARD) if backward else (
        _lib.FSA_OPERATION_FORWARD,)
    measured, buckets = ctypes.c_int(), 0
    with _gpu:
        t0 = time.monotonic()
        for heads in kv_heads:
            d = type(desc).from_buffer_copy(desc)
            d.num_kv_heads, d.num_q_heads = heads, desc.num_q_heads * heads
            plan = ctypes.c_void_p()
            lib.check(lib.fsa_plan_create(ctypes.byref(plan), ctx, ctypes.byref(d)), "fsa_plan_create")
            try:
                for tokens in TUNE_TOKENS:
                    for operation in operations:
                        lib.check(lib.fsa_plan_tune(ctypes.byref(measured), plan, operation, tokens),
                                  "fsa_plan_tune")
                        buckets += measured.value
            finally:
                lib.fsa_plan_destroy(plan)
        return buckets, (time.monotonic() - t0) * 1e3


def _plan_one(lib, ctx, target_name, job, tune=False, kv_heads=(1,)):
    """Creates and destroys one plan (a selected-attention plan measured in between when tune); an _Outcome.
    Runs on a worker thread: the error record it reads is that thread's."""
    family, desc, what = _desc_of(job)
    shape = f"{target_name} {_lib.DTYPE_NAMES[job[1]]} {what}"
    if family is None:
        create, destroy, create_name = lib.fsa_plan_create, lib.fsa_plan_destroy, "fsa_plan_create"
    else:
        create_name = f"fsa_{family}_plan_create"
        signatures = _kvcache_abi.SIGNATURES if family == "kvcache" else _nsa_abi.SIGNATURES
        create = _nsa_abi.function(lib, create_name, signatures)
        destroy = _nsa_abi.function(lib, f"fsa_{family}_plan_destroy", signatures)
    plan = ctypes.c_void_p()
    t0 = time.monotonic()
    st = create(ctypes.byref(plan), ctx, ctypes.byref(desc))
    ms = (time.monotonic() - t0) * 1e3
    try:
        if st != _lib.FSA_STATUS_OK:
            err = lib.error(st, create_name)
            if st == _lib.FSA_STATUS_UNSUPPORTED:
                return _Outcome("skipped", shape, err.info.get("message") or err.message)
            return _Outcome("failed", shape, str(err))
        ready = f"ready in {ms:.1f} ms"
        # Only selected attention has variants to measure.
        if not (tune and family is None):
            return _Outcome("ok", shape, ready)
        try:
            return _Outcome("ok", shape, ready, tuned=_tune_plan(lib, ctx, desc, kv_heads, backward=job[9]))
        except _lib.FsaError as e:
            return _Outcome("ok", shape, ready, tune_error=str(e))
    finally:
        destroy(plan)  # an offline plan cannot run; creating it was the point (NULL is fine)


def _grid(kinds, dtype_codes, head_dims, value_dim, groups, block_sizes, top_k, page_sizes, algorithm, backward,
          kernel_size, stride, window):
    """The jobs of every kind, without repeats (only the kvcache plan has a page size, the window plan has no
    block size or top-k, and the gate plan has only a dtype and a value dim)."""
    jobs, seen = [], set()  # the set: a lookup in the list made 50,000 groups take a minute
    for kind, dtype, d, g, bk, k, page in itertools.product(kinds, dtype_codes, head_dims, groups, block_sizes,
                                                            top_k, page_sizes):
        dv = value_dim
        if kind != "kvcache":
            page = 0
        if kind == "window":
            bk, k = 0, 0
        elif kind == "gate":
            d, dv, g, bk, k = 0, value_dim or d, 0, 0, 0
        job = (kind, dtype, d, dv, g, bk, k, page, algorithm, backward, kernel_size, stride, window)
        if job not in seen:
            seen.add(job)
            jobs.append(job)
    return jobs


def precompile(arch=None, detect=False, dtypes=("bf16",), head_dims=(128,), groups=(1, 2, 4, 8, 16),
               block_sizes=(64,), top_k=16, algorithm="auto", cache_dir=None, device=0, backward=False,
               verbose=False, jobs=None, kinds=("selected",), value_dim=0, kernel_size=32, stride=16, window=512,
               page_sizes=PAGE_SIZES, tune=False, kv_heads=(1,)):
    """Compiles (or finds in the cache) the kernels of every shape of the grid.

    arch: offline targets, "sm_80,sm_90a" or a list (no GPU needed); or
    detect=True for the GPU `device`. One of the two is required. Each shape
    is planned with num_kv_heads = 1 and num_q_heads = group, as the tool
    does; backward=True also builds the backward kernels. dtypes: names from
    bf16, bfloat16, fp16, f16, float16, half (or torch dtypes). jobs: compile
    threads (default: the number of CPUs); verbose: one line per shape with
    an [n/N] count and the estimated time left. kinds: any of "selected",
    "compressed" (with its top-k selection; kernel_size, stride, block sizes
    and top_k as given), "window" (window), "kvcache" (the paged-KV-cache
    decode plan: block sizes, top_k and page_sizes as given; no backward)
    and "gate" (NSA's gated sum: one plan per dtype and value dim);
    value_dim: Dv when it differs from the head dim (0 = the same), for
    every kind. page_sizes: tokens per cache page, for "kvcache" only (any
    other than the default (64,) without "kvcache" in kinds: ValueError).
    tune: with detect=True only (else ValueError), also measure each
    selected-attention plan's variants at T = 1, 4, ..., 65536 tokens
    (forward, and backward with backward=True), one plan at a time, and
    write the winners into the cache as tuning records; verbose adds a
    "tuned N buckets" line per plan. The other kinds are not measured.
    kv_heads: with tune only (else ValueError), the KV head counts each
    selected plan is measured at, num_q_heads = group x each (default
    (1,)): a record holds for its KV head count only.

    Returns a dict: compiled (NVRTC compilations), cached (kernels read from
    the disk cache), in_memory (already loaded in this process), compile_ms,
    plans (shapes ready), skipped (shapes the library does not support),
    failed (shapes whose kernels could not be built or, with tune, whose
    measuring failed), failures (list of (shape, message)), skipped_shapes,
    tuned (buckets measured), corrupt (bad disk entries found and replaced),
    write_failures (kernels that could not be written to the cache: kept in
    memory only, libfsa's warning says why), targets, cache_dir.

    Ctrl-C (KeyboardInterrupt) drops the shapes not yet started and, once
    those being compiled have finished, propagates.
    """
    if arch is not None and detect:
        raise ValueError("arch and detect exclude each other")
    if arch is None and not detect:
        raise ValueError("say what to compile for: arch='sm_80,sm_90a' (no GPU needed) or detect=True")
    if tune and not detect:
        raise ValueError("tune needs detect=True (it measures on that GPU)")
    kv_heads = _int_list("kv_heads", kv_heads)
    if kv_heads != [1] and not tune:
        raise ValueError("kv_heads applies only with tune=True (the kernels do not depend on it)")
    if algorithm not in _lib.ALGORITHMS:
        raise ValueError(f"algorithm must be 'auto', 'fsa' or 'nsa', got {algorithm!r}")
    if isinstance(dtypes, str):
        dtypes = dtypes.split(",")
    dtype_codes = []
    for d in dtypes:
        code = _dtype_code(d)
        if code not in dtype_codes:
            dtype_codes.append(code)
    if not dtype_codes:
        raise ValueError("dtypes is empty: name at least one, e.g. 'bf16'")
    head_dims = _int_list("head_dims", head_dims)
    groups = _int_list("groups", groups)
    if max(groups) * max(kv_heads) > _lib.INT32_MAX:
        raise ValueError(f"groups x kv_heads: {max(groups)} x {max(kv_heads)} query heads pass int32")
    block_sizes = _int_list("block_sizes", block_sizes)
    top_k = _int_list("top_k", top_k)
    if isinstance(kinds, str):
        kinds = kinds.split(",")
    kinds = list(dict.fromkeys(kinds))
    if not kinds or any(k not in KINDS for k in kinds):
        raise ValueError(f"kinds must be some of {', '.join(KINDS)}, got {kinds!r}")
    page_sizes = _int_list("page_sizes", page_sizes)
    if page_sizes != list(PAGE_SIZES) and "kvcache" not in kinds:
        raise ValueError("page_sizes applies to the kvcache kind only (kinds has no 'kvcache')")
    for name, v in (("value_dim", value_dim), ("kernel_size", kernel_size), ("stride", stride), ("window", window)):
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "value_dim" else 1):
            raise ValueError(f"{name} must be a {'non-negative' if name == 'value_dim' else 'positive'} int, got {v!r}")
        if v > _lib.INT32_MAX:
            raise ValueError(f"{name}: {v} is past int32 (at most {_lib.INT32_MAX})")
    if jobs is None:
        jobs = os.cpu_count() or 1
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive int, got {jobs!r}")
    targets = _targets(arch) if arch is not None else [None]
    if detect:
        device = _device_ordinal(device)
    _cache_dir_bytes(cache_dir)  # a TypeError before anything is loaded

    lib = _lib.get()
    if tune and lib.fsa_plan_tune is None:
        raise RuntimeError(f"{lib.path} has no fsa_plan_tune: rebuild it from a version that tunes")
    summary = {"compiled": 0, "cached": 0, "in_memory": 0, "compile_ms": 0.0, "plans": 0, "skipped": 0,
               "failed": 0, "failures": [], "skipped_shapes": [], "tuned": 0, "corrupt": 0, "write_failures": 0,
               "targets": [], "cache_dir": None}
    contexts, futures = [], []
    try:
        for target in targets:
            contexts.append(_open_context(lib, target, device, cache_dir))
            summary["cache_dir"] = _disk_cache_dir(lib, contexts[-1])
            summary["targets"].append(_lib._text(lib.fsa_context_target(contexts[-1])))
        before = [_stats(lib, ctx) for ctx in contexts]
        jobs_of_grid = _grid(kinds, dtype_codes, head_dims, value_dim, groups, block_sizes, top_k, page_sizes,
                             algorithm, backward, kernel_size, stride, window)
        grid = [(ctx, name, job) for job in jobs_of_grid for ctx, name in zip(contexts, summary["targets"])]
        t0 = time.monotonic()
        # ctypes releases the GIL during each call, so NVRTC compiles run in parallel.
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(jobs, len(grid)))
        try:
            for job in grid:
                futures.append(pool.submit(_plan_one, lib, *job, tune=tune, kv_heads=kv_heads))
            for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                r = future.result()
                if r.kind == "skipped":
                    summary["skipped"] += 1
                    summary["skipped_shapes"].append((r.shape, r.detail))
                elif r.kind == "failed" or r.tune_error is not None:
                    summary["failed"] += 1
                    summary["failures"].append((r.shape, r.detail if r.kind == "failed" else f"tuning: {r.tune_error}"))
                else:
                    summary["plans"] += 1
                if r.tuned is not None:
                    summary["tuned"] += r.tuned[0]
                if verbose:
                    _print_outcome(r, done, len(grid), t0)
        except BaseException:
            # Ctrl-C (or an error) ends the run now: the queued shapes are dropped rather than compiled
            # first, as leaving a `with` block would.
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
        for ctx, b in zip(contexts, before):
            after = _stats(lib, ctx)
            summary["compiled"] += after.compiles - b.compiles
            summary["cached"] += after.disk_hits - b.disk_hits
            summary["in_memory"] += after.memory_hits - b.memory_hits
            summary["compile_ms"] += after.compile_ms - b.compile_ms
            summary["corrupt"] += after.corrupt_entries - b.corrupt_entries
            summary["write_failures"] += after.write_failures - b.write_failures
    finally:
        # context.h: a context must not be destroyed while another thread uses it. The plans still being
        # made (at most `jobs`) finish first; a second Ctrl-C during that wait leaves the contexts to the
        # process's exit rather than free them under a running plan (a crash). wait() would never count a
        # shape the shutdown cancelled as done.
        concurrent.futures.wait([f for f in futures if not f.cancelled()])
        for ctx in contexts:
            lib.fsa_context_destroy(ctx)
    return summary


def _print_outcome(r, done, total, t0):
    """The shape's line with its [n/N] count (and its tuning line), as the C tool prints them."""
    status = {"skipped": "skipped: ", "failed": "FAILED: "}.get(r.kind, "")
    print(f"[{done}/{total}{_eta(t0, done, total)}] {r.shape}: {status}{r.detail}", flush=True)
    if r.tuned is not None:
        print(f"  {r.shape}: tuned {r.tuned[0]} buckets in {r.tuned[1]:.1f} ms", flush=True)
    if r.tune_error is not None:
        print(f"  {r.shape}: tuning FAILED: {r.tune_error}", file=sys.stderr, flush=True)


def _eta(t0, done, total):
    """', about 1 min 20 s left' from the pace so far; '' at the end or too early to say."""
    if done >= total or done == 0:
        return ""
    left = (time.monotonic() - t0) / done * (total - done)
    if left < 1:
        return ""
    return f", about {int(left) // 60} min {int(left) % 60:02d} s left" if left >= 60 else f", about {left:.0f} s left"

