"""precompile: fills the kernel cache ahead of time, like tools/fsa-precompile.

A shape is precompiled by creating (and destroying) a plan for it, so the
cache ends up holding exactly what a later plan creation looks up. Needs no
torch and, with `arch`, no GPU.
"""

import ctypes
import itertools

from . import _lib

def _dtype_code(d):
    return _lib.dtype_code(d)


def _int_list(name, values):
    if isinstance(values, int):
        values = (values,)
    out = []
    for x in values:
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            raise ValueError(f"{name}: {x!r} is not a positive int")
        if x not in out:
            out.append(x)
    if not out:
        raise ValueError(f"{name} is empty")
    return out


def _targets(arch):
    if isinstance(arch, str):
        arch = arch.split(",")
    out = []
    for a in arch:
        a = a.strip()
        if not a:
            raise ValueError(f"arch: empty target in {arch!r}")
        if a not in out:
            out.append(a)
    return out


def _stats(lib, ctx):
    s = _lib.fsa_cache_stats()
    lib.check(lib.fsa_context_cache_stats(ctypes.byref(s), ctx), "fsa_context_cache_stats")
    return s


def precompile(arch=None, detect=False, dtypes=("bf16",), head_dims=(128,), groups=(1, 2, 4, 8, 16),
               block_sizes=(64,), top_k=16, algorithm="auto", cache_dir=None, device=0, backward=False,
               verbose=False):
    """Compiles (or finds in the cache) the kernels of every shape of the grid.

    arch: offline targets, "sm_80,sm_90a" or a list (no GPU needed); or
    detect=True for the GPU `device`. One of the two is required. Each shape
    is planned with num_kv_heads = 1 and num_q_heads = group, as the tool
    does; backward=True also builds the backward kernels.

    Returns a dict: compiled (NVRTC compilations), cached (kernels read from
    the disk cache), in_memory (already loaded in this process), compile_ms,
    plans (shapes ready), skipped (shapes the library does not support),
    failed (shapes whose kernels could not be built), failures (list of
    (shape, message)), skipped_shapes, targets, cache_dir.
    """
    if arch is not None and detect:
        raise ValueError("arch and detect exclude each other")
    if arch is None and not detect:
        raise ValueError("say what to compile for: arch='sm_80,sm_90a' (no GPU needed) or detect=True")
    if algorithm not in _lib.ALGORITHMS:
        raise ValueError(f"algorithm must be 'auto', 'fsa' or 'nsa', got {algorithm!r}")
    if isinstance(dtypes, str):
        dtypes = dtypes.split(",")
    dtype_codes = []
    for d in dtypes:
        code = _dtype_code(d)
        if code not in dtype_codes:
            dtype_codes.append(code)
    head_dims = _int_list("head_dims", head_dims)
    groups = _int_list("groups", groups)
    block_sizes = _int_list("block_sizes", block_sizes)
    top_k = _int_list("top_k", top_k)
    targets = _targets(arch) if arch is not None else [None]

    lib = _lib.get()
    summary = {"compiled": 0, "cached": 0, "in_memory": 0, "compile_ms": 0.0, "plans": 0, "skipped": 0,
               "failed": 0, "failures": [], "skipped_shapes": [], "targets": [], "cache_dir": None}
    for target in targets:
        options = _lib.fsa_context_options(
            device=_lib.FSA_DEVICE_NONE if target is not None else device,
            target=target.encode() if target is not None else None,
            cache_dir=cache_dir.encode() if cache_dir is not None else None,
            # The environment's FSA_CACHE_MODE and FSA_JIT are for applications;
            # precompiling means compiling and writing.
            cache_mode=_lib.FSA_CACHE_MODE_READ_WRITE,
            jit=_lib.FSA_JIT_ON,
            log=1,
        )
        ctx = ctypes.c_void_p()
        lib.check(lib.fsa_context_create(ctypes.byref(ctx), ctypes.byref(options)), "fsa_context_create")
        try:
            name = _lib._text(lib.fsa_context_target(ctx))
            where = _lib._text(lib.fsa_context_cache_dir(ctx))
            if not where:
                raise RuntimeError(f"{name}: no usable cache directory (see the warning above); nothing would be kept")
            summary["targets"].append(name)
            summary["cache_dir"] = where
            before = _stats(lib, ctx)
            for dtype, d, g, bk, k in itertools.product(dtype_codes, head_dims, groups, block_sizes, top_k):
                shape = f"{name} {'f16' if dtype == _lib.FSA_DTYPE_F16 else 'bf16'} d{d} g{g} bk{bk} k{k}"
                desc = _lib.fsa_selected_attention_desc(
                    dtype=dtype, head_dim=d, num_q_heads=g, num_kv_heads=1, block_size=bk, top_k=k,
                    algorithm=_lib.ALGORITHMS[algorithm], backward=int(bool(backward)),
                )
                plan = ctypes.c_void_p()
                st = lib.fsa_plan_create(ctypes.byref(plan), ctx, ctypes.byref(desc))
                if st == _lib.FSA_STATUS_OK:
                    summary["plans"] += 1
                    result = "ok"
                elif st == _lib.FSA_STATUS_UNSUPPORTED:
                    err = lib.error(st, "fsa_plan_create")
                    summary["skipped"] += 1
                    summary["skipped_shapes"].append((shape, err.info.get("message") or err.message))
                    result = "skipped: " + (err.info.get("message") or err.message)
                else:
                    err = lib.error(st, "fsa_plan_create")
                    summary["failed"] += 1
                    summary["failures"].append((shape, str(err)))
                    result = "FAILED: " + str(err)
                lib.fsa_plan_destroy(plan)  # an offline plan cannot run; creating it was the point
                if verbose:
                    print(f"{shape}: {result}", flush=True)
            after = _stats(lib, ctx)
            summary["compiled"] += after.compiles - before.compiles
            summary["cached"] += after.disk_hits - before.disk_hits
            summary["in_memory"] += after.memory_hits - before.memory_hits
            summary["compile_ms"] += after.compile_ms - before.compile_ms
        finally:
            lib.fsa_context_destroy(ctx)
    return summary
