"""Console commands of the Python package: fsa-precompile and fsa-bench.

They take the C tools' option spellings (tools/precompile_options.c,
tools/bench_options.c) for what they share, so a command line works with either;
fsa-precompile has every option of its C tool (the grid, --tune, --list,
--verify, --prune), with the same usage checks and exit statuses. --list,
--verify and --prune print the C tool's lines; compiling prints its own
progress and totals (with the C tool's words for corrupt entries found and
kernels not written to the cache, and its message for those on stderr).
Exit status: 0 success; 1 something failed (a shape, a kernel not written to
the cache, the output); 2 usage error; 3 the target or device cannot be used
(an --arch the library rejects, no GPU or driver).
"""

import argparse
import functools
import io
import json
import math
import os
import re
import sys
import time

from . import _lib
from ._parse import is_decimal

EXIT_FAILED, EXIT_USAGE, EXIT_TARGET = 1, 2, 3
_TARGET_STATUSES = (_lib.FSA_STATUS_INVALID_ARGUMENT, _lib.FSA_STATUS_UNSUPPORTED_DEVICE,
                    _lib.FSA_STATUS_NO_DRIVER, _lib.FSA_STATUS_NO_DEVICE)


# As tools/precompile_lists.h: a typo such as 1-1000000000 is a usage error, not a list of a billion numbers.
MAX_LIST_VALUES, MAX_LIST_VALUE = 4096, 1000000
MAX_JOBS = 1024  # fsa-precompile -j (tools/precompile_options.h)


def _digits(text):
    """A whole number as the C tools spell it (_parse.is_decimal); ValueError otherwise."""
    if not is_decimal(text):
        raise ValueError(f"{text!r} is not a number")
    return int(text)


def _number(minimum, maximum):
    """type= for one whole number minimum..maximum, spelled as the C tools take it (_digits)."""
    def number(text):
        try:
            value = _digits(text)
        except ValueError:
            value = None
        if value is None or not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"'{text}' is not a number from {minimum} to {maximum}")
        return value
    return number


_MS = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _milliseconds(text):
    """fsa-bench's --min-ms and --warmup-ms as the C tool takes them (tools/tool_args.c): a decimal number
    0..1e7, digits first; no sign, space, hex, inf or nan (float() takes all of them, and a warm-up of inf ms
    never ends)."""
    value = float(text) if text.isascii() and _MS.fullmatch(text) else math.nan
    if not 0 <= value <= 1e7:
        raise argparse.ArgumentTypeError(f"'{text}' is not a time in ms from 0 to 1e7")
    return value


def _int_list(text, max_value=MAX_LIST_VALUE):
    """'64,128', '1-8', '16-256:16' and comma-separated mixes, as the C tools take them: numbers 1..max_value,
    at most MAX_LIST_VALUES of them, repeats counted (and then dropped)."""
    out, listed = {}, 0
    for item in text.split(","):
        lo, dash, rest = item.partition("-")
        hi, colon, step = rest.partition(":")
        try:
            lo = _digits(lo)
            hi = _digits(hi) if dash else lo
            step = _digits(step) if colon else 1
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{item}' is not a number list item (numbers 1..{max_value}, e.g. "
                                             "64,128 or 1-8 or 16-256:16)")
        if lo < 1 or hi < lo or not 1 <= step <= max_value or hi > max_value:  # the step too, as the C tools
            raise argparse.ArgumentTypeError(f"'{item}' is not a range of numbers 1..{max_value}")
        values = range(lo, hi + 1, step)
        listed += len(values)
        if listed > MAX_LIST_VALUES:
            raise argparse.ArgumentTypeError(f"more than {MAX_LIST_VALUES} values")
        out.update(dict.fromkeys(values))
    return list(out)


def _dtype_list(text):
    try:
        return [_lib.DTYPE_NAMES[_lib.dtype_code(d)] for d in _name_list(text)]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))


def _c_bytes(text):
    """A byte count as the C tools take one (tools/tool_args.c, tool_parse_bytes): digits with one optional
    K, M, G or T (any case; powers of 1024) that fit in 64 bits; no sign, no spaces. None otherwise."""
    try:
        value = _lib.parse_bytes(text, "bytes") if text.isascii() and text == text.strip() else None
    except ValueError:
        value = None
    return value if value is not None and value < 1 << 64 else None


def _workspace_limit(text):
    """fsa-bench's --workspace-limit as the C tool takes it: a byte count (_c_bytes) or exactly 'unlimited'
    (the operators' workspace_limit also takes ' 2G' and 'UNLIMITED'); as selected_attention takes it."""
    value = "unlimited" if text == "unlimited" else _c_bytes(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"'{text}' is not a byte count (e.g. 512M, 2G) or 'unlimited'")
    # No workspace comes near 2^63 bytes, so such a cap binds nothing: no cap, which torch's int64 can hold.
    return "unlimited" if value != "unlimited" and value >= 1 << 63 else value


def _version_action(prog):
    return dict(action="version", version=f"{prog} {_lib.package_version()}")


# ------------------------------------------------------------------ precompile

# Grid options and -j, with their defaults. Parsed with None as the default so that giving one can be told
# from leaving it out: they apply only when compiling.
_GRID_DEFAULTS = {"dtype": ["bf16"], "head_dim": [128], "group": [1, 2, 4, 8, 16], "block_size": [64],
                  "top_k": 16, "algorithm": "auto", "kind": "selected", "value_dim": 0, "kernel_size": 32,
                  "stride": 16, "window": 512, "page_size": None, "kv_heads": [1], "jobs": None}


def _name_list(text):
    """'sm_80,sm_90a': comma-separated names, none empty, none with a blank around it (as the C tool takes
    them), repeats dropped."""
    names = text.split(",")
    if not all(names):
        raise argparse.ArgumentTypeError(f"empty item in '{text}'")
    if any(n != n.strip() for n in names):
        raise argparse.ArgumentTypeError(f"blank around an item in '{text}'")
    return list(dict.fromkeys(names))


def _max_bytes(text):
    """--max-bytes as the C tool takes it (_c_bytes)."""
    value = _c_bytes(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"'{text}' is not a byte count (e.g. 500M, 2G, 0)")
    return value


def _precompile_parser():
    from .precompile import KINDS, PAGE_SIZES

    p = argparse.ArgumentParser(
        prog="fsa-precompile",
        description="Fills the fsa-jit kernel cache ahead of time for a grid of shapes (num_kv_heads 1, "
                    "num_q_heads = group), or lists, verifies or prunes that cache. Exit status: 0 success, "
                    "1 a compile failed, --verify found bad entries or the cache could not be used, 2 usage "
                    "error, 3 the target or device cannot be used.")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--arch", type=_name_list,
                       help="offline targets, e.g. sm_80,sm_90a (no GPU needed); --list, --verify and --prune "
                            "take one (default sm_80)")
    where.add_argument("--detect", action="store_true", help="the target of the GPU chosen by --device")
    p.add_argument("--device", type=_number(0, 1023), help="CUDA device ordinal for --detect (default 0)")
    grid = p.add_argument_group("grid (compiling only)")
    grid.add_argument("--dtype", type=_dtype_list, help="bf16 (default), f16 (or bfloat16, fp16, float16, half)")
    grid.add_argument("--head-dim", type=_int_list, help="default 128")
    grid.add_argument("--group", type=_int_list, help="query heads per KV head (default 1,2,4,8,16)")
    grid.add_argument("--block-size", type=_int_list, help="default 64")
    grid.add_argument("--top-k", type=_number(1, MAX_LIST_VALUE), help="default 16")
    grid.add_argument("--algorithm", choices=("auto", "fsa", "nsa"), help="default auto")
    grid.add_argument("--backward", action="store_true", help="also the backward kernels")
    grid.add_argument("--kind", help=f"plans to make: {', '.join(KINDS)}, comma-separated (default selected)")
    grid.add_argument("--value-dim", type=_number(1, MAX_LIST_VALUE),
                      help="Dv when it differs from the head dim (default: the same)")
    grid.add_argument("--kernel-size", type=_number(1, MAX_LIST_VALUE),
                      help="compression kernel l (compressed; default 32)")
    grid.add_argument("--stride", type=_number(1, MAX_LIST_VALUE),
                      help="compression stride d (compressed; default 16)")
    grid.add_argument("--window", type=_number(1, MAX_LIST_VALUE), help="window W (window; default 512)")
    grid.add_argument("--page-size", type=_int_list,
                      help=f"tokens per cache page (kvcache; default {','.join(map(str, PAGE_SIZES))})")
    grid.add_argument("--tune", action="store_true",
                      help="with --detect: also measure each selected plan's variants at T = 1, 4, ..., 65536 "
                           "and write tuning records into the cache")
    grid.add_argument("--kv-heads", type=_int_list,
                      help="with --tune: the KV head counts to measure at, num_q_heads = group x each (default 1); "
                           "a record holds for its count only")
    grid.add_argument("-j", "--jobs", type=_number(1, MAX_JOBS), help="compile threads (default: CPUs)")
    cache = p.add_argument_group("cache")
    cache.add_argument("--cache-dir", help="default (also for an empty DIR) $FSA_CACHE_DIR, else "
                                           "$XDG_CACHE_HOME/fsa, else ~/.cache/fsa")
    mode = cache.add_mutually_exclusive_group()
    mode.add_argument("--list", action="store_true", help="print every entry (target, name, bytes, mtime) and "
                                                          "the total")
    mode.add_argument("--verify", action="store_true", help="re-check every entry and delete bad ones (with "
                                                            "--detect, also load the device target's entries)")
    mode.add_argument("--prune", action="store_true", help="delete least recently used entries until the cache "
                                                           "holds at most --max-bytes")
    cache.add_argument("--max-bytes", type=_max_bytes, help="for --prune: suffixes K, M, G, T (powers of 1024)")
    p.add_argument("--version", **_version_action("fsa-precompile"))
    return p


def _check_precompile_options(p, a):
    """The C tool's rules for options that make no sense together (p.error: exit 2); fills the grid's
    defaults and a.mode (None when compiling, else list, verify or prune)."""
    from .precompile import KINDS

    a.mode = "list" if a.list else "verify" if a.verify else "prune" if a.prune else None
    grid_given = a.backward or a.tune or any(getattr(a, name) is not None for name in _GRID_DEFAULTS)
    # As the C tool: --kind is judged while parsing, then the options of a kind not asked for, then the rest.
    # An empty item is refused, a repeated one counts once (its kinds are flags).
    kinds = list(dict.fromkeys((a.kind if a.kind is not None else _GRID_DEFAULTS["kind"]).split(",")))
    if any(k not in KINDS for k in kinds):
        p.error(f"--kind: some of {', '.join(KINDS)} (comma-separated), got {','.join(kinds)!r}")
    if (a.kernel_size is not None or a.stride is not None) and "compressed" not in kinds:
        p.error("--kernel-size and --stride apply only to --kind compressed")
    if a.window is not None and "window" not in kinds:
        p.error("--window applies only to --kind window")
    if a.kv_heads is not None and not a.tune:
        p.error("--kv-heads applies only to --tune (the kernels do not depend on it)")
    if a.device is not None and not a.detect:
        p.error("--device needs --detect")
    if a.tune and not a.detect:
        p.error("--tune needs --detect (it measures on that GPU)")
    if a.prune and a.max_bytes is None:
        p.error("--prune needs --max-bytes N")
    if a.max_bytes is not None and not a.prune:
        p.error("--max-bytes applies only to --prune")
    if a.mode and a.arch is not None and len(a.arch) > 1:
        p.error("--list, --verify and --prune take one --arch")
    if a.mode and grid_given:
        p.error("grid options and -j apply only when compiling, not with --list, --verify or --prune")
    for name, default in _GRID_DEFAULTS.items():
        if getattr(a, name) is None:
            setattr(a, name, default)
    a.device = a.device or 0
    a.kind = kinds
    if a.page_size is not None and "kvcache" not in a.kind:
        p.error("--page-size applies to --kind kvcache")
    for size in a.page_size or ():
        if size not in _PAGE_SIZE_SET:
            p.error(f"--page-size: {size} is not 1, 16, 32, 64, 128 or 256")
    if a.mode is None and a.arch is None and not a.detect:
        p.error("say what to compile for: --arch LIST (e.g. sm_80,sm_90a) or --detect")
    if a.mode is None and _grid_count(a, 1 if a.detect else len(a.arch)) > MAX_COMBINATIONS:
        p.error(f"the grid has more than {MAX_COMBINATIONS} combinations")


_PAGE_SIZE_SET = (1, 16, 32, 64, 128, 256)  # the paged cache's page sizes (docs/kvcache.md)
MAX_COMBINATIONS = 100000  # as the C tool: a typo such as --group 1-4096 is a usage error, not a day of compiles


def _grid_count(a, n_targets):
    """Shapes the grid asks for, each kind over the dimensions it takes (as tools/precompile_grid.c)."""
    from .precompile import PAGE_SIZES

    total = 0
    for k in a.kind:
        dims = (n_targets, 1 if k in ("window", "gate") else len(a.block_size), 1 if k == "gate" else len(a.group),
                len(a.head_dim), len(a.dtype), len(a.page_size or PAGE_SIZES) if k == "kvcache" else 1)
        total += math.prod(dims)
    return total


class _Output:
    """stdout or stderr for one command, as C's stdio keeps them: a write that fails (a full disk, a closed pipe)
    sets `failed` and drops the rest instead of raising; for stdout the command says so at its end
    (_finish_output)."""

    def __init__(self, stream, prog):
        # None: the process was started without this stream (`>&-`): nothing can be written.
        self.stream, self.prog, self.failed = stream, prog, stream is None

    def write(self, text):
        if not self.failed:
            try:
                try:
                    self.stream.write(text)
                except UnicodeEncodeError:
                    # A path the stream's encoding cannot spell (PYTHONIOENCODING=ascii, a Latin-1 locale):
                    # escaped, as Python's own stderr writes it, rather than an error after the work is done.
                    encoding = getattr(self.stream, "encoding", None) or "utf-8"
                    self.stream.write(text.encode(encoding, "backslashreplace").decode(encoding))
            except OSError:
                self.failed = True
        return len(text)

    def flush(self):
        if not self.failed:
            try:
                self.stream.flush()
            except OSError:
                self.failed = True

    def __getattr__(self, name):
        return getattr(self.stream, name)


def _drop_unwritten(out):
    """Points the failed stream's file descriptor at /dev/null: what it holds unwritten is dropped, so that
    Python's own flush at exit does not fail again (a traceback on stdout, exit status 120 on stderr)."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, out.stream.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass  # not a file descriptor (a test's capture, say): nothing is flushed at exit


def _finish_output(out, err, rc):
    """rc, or 1 (as the C tool) when stdout could not be written: said on stderr. A message that stderr could
    not take changes nothing, as in the C tool (whose fprintf to stderr is not checked)."""
    out.flush()
    if out.failed:
        print(f"{out.prog}: cannot write the output", file=err)
        rc = rc or EXIT_FAILED
        _drop_unwritten(out)
    err.flush()
    if err.failed:
        _drop_unwritten(err)
    return rc


def _with_output(prog, main, argv):
    """main(argv) with stdout and stderr as _Outputs: its exit status, 1 where stdout could not be written.
    A stderr that is closed or full neither changes the status nor sends the messages to stdout (print's
    file=None, argparse's usage without a stderr, write there)."""
    out = sys.stdout = _Output(sys.stdout, prog)
    err = sys.stderr = _Output(sys.stderr, prog)
    try:
        return _finish_output(out, err, main(argv))
    except SystemExit as e:  # argparse: --help and --version (on stdout), usage errors
        raise SystemExit(_finish_output(out, err, e.code)) from None
    finally:
        sys.stdout, sys.stderr = out.stream, err.stream


def precompile_main(argv=None):
    return _with_output("fsa-precompile", _precompile_main, argv)


def _precompile_main(argv):
    p = _precompile_parser()
    a = p.parse_args(argv)
    _check_precompile_options(p, a)
    try:
        return _maintain(a) if a.mode else _compile(a)
    except ValueError as e:
        p.error(str(e))
    except _lib.FsaError as e:  # before RuntimeError, its base
        print(f"fsa-precompile: {e}", file=sys.stderr)
        unusable_target = e.function == "fsa_context_create" and e.status in _TARGET_STATUSES
        return EXIT_TARGET if unusable_target else EXIT_FAILED
    except (_lib.FsaLibraryNotFound, RuntimeError) as e:
        print(f"fsa-precompile: {e}", file=sys.stderr)
        return EXIT_FAILED


def _compile(a):
    from .precompile import PAGE_SIZES, precompile

    s = precompile(arch=a.arch, detect=a.detect, device=a.device, dtypes=a.dtype, head_dims=a.head_dim,
                   groups=a.group, block_sizes=a.block_size, top_k=a.top_k, algorithm=a.algorithm,
                   backward=a.backward, cache_dir=a.cache_dir, jobs=a.jobs, verbose=True, kinds=a.kind,
                   value_dim=a.value_dim, kernel_size=a.kernel_size, stride=a.stride, window=a.window,
                   page_sizes=a.page_size or PAGE_SIZES, tune=a.tune, kv_heads=a.kv_heads)
    for shape, message in s["failures"]:
        print(f"FAILED {shape}: {message}", file=sys.stderr)
    # The C tool's words for a corrupt entry found and an unwritten kernel (on its per-target lines).
    replaced = f", {s['corrupt']} corrupt entries found" if s["corrupt"] else ""
    unwritten = f", {s['write_failures']} NOT written to the cache" if s["write_failures"] else ""
    print(f"cache: {s['cache_dir']}\n{s['compiled']} kernels compiled, {s['cached']} already cached, "
          f"{s['failed']} failed, {s['skipped']} skipped (NVRTC {s['compile_ms']:.1f} ms){replaced}{unwritten}")
    # A kernel kept in memory only is missing from the cache the run was for.
    if s["write_failures"]:
        print(f"fsa-precompile: {s['write_failures']} kernels could not be written to the cache (see the warning "
              "above)", file=sys.stderr)
    rc = EXIT_FAILED if s["failed"] or s["write_failures"] else 0
    if s["skipped"] and not (s["compiled"] or s["cached"] or s["failed"]):  # nothing the library takes was asked for
        print("fsa-precompile: every shape was skipped as unsupported: nothing precompiled", file=sys.stderr)
        rc = EXIT_FAILED
    return rc


def _human_bytes(n):
    """'432.6 KiB': for people; the exact count is printed beside it."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    value, unit = float(n), 0
    while value >= 1024 and unit + 1 < len(units):
        value /= 1024
        unit += 1
    return f"{n} B" if unit == 0 else f"{value:.1f} {units[unit]}"


def _iso_time(seconds):
    """An mtime in UTC, ISO 8601."""
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
    except (OverflowError, OSError, ValueError):
        return f"@{seconds}"


def _entries(n):
    return f"{n} entr{'y' if n == 1 else 'ies'}"


def _maintain(a):
    """--list, --verify, --prune: the C tool's lines and exit statuses."""
    from .cache import cache_entries, prune_cache, verify_cache

    where = dict(cache_dir=a.cache_dir, arch=a.arch[0] if a.arch else None, detect=a.detect, device=a.device)
    if a.mode == "list":
        r = cache_entries(**where)
        print(f"cache: {r['cache_dir']}")
        for e in r["entries"]:
            print(f"{e.target:<8} {e.name:<44} {e.bytes:>10}  {_iso_time(e.mtime)}")
        print(f"{_entries(len(r['entries']))}, {r['bytes']} bytes ({_human_bytes(r['bytes'])})")
        return 0
    if a.mode == "verify":
        r = verify_cache(**where)
        print(f"cache: {r['cache_dir']}")
        for e in r["entries"]:
            # A valid kernel of the GPU's own target that did not load was checked on disk only (a record
            # is never loaded).
            disk_only = e.valid and not e.loaded and not e.record and a.detect and e.target == r["target"]
            fate = (" (not loaded)" if disk_only else "") if e.valid else " (deleted)" if e.deleted else " (NOT deleted)"
            print(f"{'OK' if e.valid else 'BAD':<3} {e.target:<8} {e.name}{fate}")
        loaded = f", {r['loaded']} loaded on the device" if a.detect else ""  # offline, none can load
        print(f"{_entries(len(r['entries']))} checked, {r['bad']} bad, {r['deleted']} deleted{loaded}")
        return EXIT_FAILED if r["bad"] else 0
    try:
        r = prune_cache(a.max_bytes, **where)
    except _lib.FsaError as e:
        if hasattr(e, "removed"):  # as the C tool: what was done, then (precompile_main) why it failed
            _print_pruned(e.cache_dir, e.removed, e.bytes_left)
        raise
    _print_pruned(r["cache_dir"], r["removed"], r["bytes_left"])
    return 0


def _print_pruned(cache_dir, removed, bytes_left):
    files = f"removed {removed} file{'' if removed == 1 else 's'}"
    if bytes_left is None:  # the scan stopped: what is left is unknown
        print(f"cache: {cache_dir}\n{files}; the cache was not fully read", flush=True)
    else:
        print(f"cache: {cache_dir}\n{files}; {bytes_left} bytes ({_human_bytes(bytes_left)}) left", flush=True)


# ----------------------------------------------------------------------- bench


def _selection(T, Hkv, K, BK, gen, torch):
    """int32 [Hkv, T, K] on the GPU. Per KV head and token: block 0, the own block c and c - 1
    always, the rest distinct random blocks of 0..c; rows sorted, tail -1 (the C fsa-bench's
    protocol). One head at a time keeps the [T, blocks] scores small."""
    own = torch.arange(T, device="cuda") // BK
    n_blocks = int(own[-1]) + 1
    future = torch.arange(n_blocks, device="cuda").view(1, -1) > own.view(-1, 1)
    k = min(K, n_blocks)
    out = torch.full((Hkv, T, K), -1, dtype=torch.int32, device="cuda")
    for h in range(Hkv):
        scores = torch.rand(T, n_blocks, generator=gen, device="cuda")
        scores[:, 0] = 2
        scores.scatter_(1, (own - 1).clamp_min(0).view(-1, 1), 2.5)
        scores.scatter_(1, own.view(-1, 1), 3.0)
        scores.masked_fill_(future, -1)
        top = scores.topk(k, dim=1)
        idx = torch.where(top.values >= 0, top.indices, n_blocks).sort(dim=1).values
        out[h, :, :k] = torch.where(idx == n_blocks, -1, idx).int()
    return out


def _median_ms(fn, min_ms, warmup_ms, torch):
    import time

    t0 = time.monotonic()
    while (time.monotonic() - t0) * 1e3 < warmup_ms:
        fn()
        torch.cuda.synchronize()
    times = []
    while sum(times) < min_ms or len(times) < 10:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
        if len(times) >= 4096:
            break
    times.sort()
    n = len(times)
    return times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])


def bench_main(argv=None):
    return _with_output("fsa-bench", _bench_main, argv)


def _bench_main(argv):
    p = argparse.ArgumentParser(
        prog="fsa-bench",
        description="Times fsa_jit.selected_attention on the GPU with CUDA events (median of repeats covering "
                    "--min-ms after --warmup-ms). Exit status: 0 success, 1 failure, 2 usage error, 3 no "
                    "usable GPU.")
    # The C fsa-bench's limit (tools/bench_options.c): cu_seqlens are int32.
    tokens = functools.partial(_int_list, max_value=1 << 30)
    p.add_argument("-T", type=tokens, default=[8192], help="token counts, e.g. 8192,65536")
    p.add_argument("-G", type=tokens, default=[1, 2, 4, 8, 16], help="query heads per KV head")
    p.add_argument("-D", type=_number(0, 1 << 16), default=128, help="head dim")
    p.add_argument("--q-heads", type=_number(0, 1 << 16), default=32)
    p.add_argument("--block-size", type=_number(0, 1 << 16), default=64)
    p.add_argument("--top-k", type=_number(0, 1 << 16), default=16)
    p.add_argument("--dtype", type=_dtype_list, default=["bf16"])
    p.add_argument("--algorithm", choices=("auto", "fsa", "nsa"), default="auto")
    p.add_argument("--workspace-limit", type=_workspace_limit, default=0, help="bytes; suffixes K, M, G, T; 0 = libfsa's default cap, 'unlimited' = none")
    p.add_argument("--backward", action="store_true", help="also time forward + backward")
    p.add_argument("--min-ms", type=_milliseconds, default=100.0)
    p.add_argument("--warmup-ms", type=_milliseconds, default=25.0)
    p.add_argument("--json", help="write the rows to this file")
    p.add_argument("--version", **_version_action("fsa-bench"))
    a = p.parse_args(argv)
    if len(a.dtype) != 1:
        p.error("--dtype: one type per run")
    if a.json == "":  # as the C fsa-bench; open("") would fail only after every row had run
        p.error("--json: empty file name")
    # As the C fsa-bench: a group that does not divide the heads would leave its rows out silently.
    if a.q_heads >= 1 and any(a.q_heads % G for G in a.G):
        p.error("-G: every group must divide --q-heads")
    try:
        import torch
    except ImportError:
        print("fsa-bench: needs torch (pip install 'fsa-jit[torch]')", file=sys.stderr)
        return EXIT_FAILED
    from .attention import BLOCK_SIZES, MAX_HEAD_DIM, MAX_TOP_K

    # selected_attention's rules for the options, as usage errors (exit 2) rather than a ValueError later.
    if a.q_heads < 1:
        p.error(f"--q-heads: at least 1, got {a.q_heads}")
    if a.D % 16 or not 16 <= a.D <= MAX_HEAD_DIM:
        p.error(f"-D: a multiple of 16 from 16 to {MAX_HEAD_DIM}, got {a.D}")
    if a.block_size not in BLOCK_SIZES:
        p.error(f"--block-size: one of {', '.join(map(str, BLOCK_SIZES))}, got {a.block_size}")
    if not 1 <= a.top_k <= MAX_TOP_K:
        p.error(f"--top-k: 1..{MAX_TOP_K}, got {a.top_k}")
    if not torch.cuda.is_available():
        print("fsa-bench: no CUDA device", file=sys.stderr)
        return EXIT_TARGET

    dtype = torch.bfloat16 if a.dtype[0] == "bf16" else torch.float16
    # As the C fsa-bench, the file is opened before the first row: a path that cannot be written fails the
    # run now, not after every row has run.
    try:
        json_file = open(a.json, "w") if a.json else None
    except OSError as e:
        print(f"fsa-bench: cannot write {a.json}: {e.strerror or e}", file=sys.stderr)
        return EXIT_FAILED
    try:
        return _bench_rows(p, a, torch, dtype, json_file)
    finally:
        if json_file is not None:
            try:
                json_file.close()  # after an early return or a failed write; a no-op after the rows
            except OSError:
                pass  # the write failed: _bench_rows said so


def _bench_rows(p, a, torch, dtype, json_file):
    """fsa-bench's rows, printed and, with --json, written to json_file (open, closed by the caller)."""
    from . import selected_attention

    rows = []
    print(f"# fsa-bench (Python) {_lib.package_version()} on {torch.cuda.get_device_name()}, {a.dtype[0]}")
    print("|      T |  G |   D |   fwd ms | TFLOP/s |" + ("  f+b ms |" if a.backward else ""))
    for T in a.T:
        for G in a.G:
            hkv = a.q_heads // G
            gen = torch.Generator(device="cuda").manual_seed(T * 31 + G)
            q, k, v = (torch.randn(T, h, a.D, generator=gen, device="cuda").to(dtype).requires_grad_(a.backward)
                       for h in (a.q_heads, hkv, hkv))
            topk = _selection(T, hkv, a.top_k, a.block_size, gen, torch)
            cu = torch.tensor([0, T], dtype=torch.int32, device="cuda")
            kw = dict(block_size=a.block_size, max_seqlen=T, algorithm=a.algorithm, workspace_limit=a.workspace_limit)
            try:
                with torch.no_grad():
                    fwd = _median_ms(lambda: selected_attention(q, k, v, topk, cu, **kw), a.min_ms, a.warmup_ms, torch)
                row = {"T": T, "G": G, "D": a.D, "ms_fwd": fwd}
                if a.backward:
                    do = torch.randn(T, a.q_heads, a.D, generator=gen, device="cuda").to(dtype)
                    step = lambda: torch.autograd.grad(selected_attention(q, k, v, topk, cu, **kw), (q, k, v), do)  # noqa: E731
                    row["ms_fwd_bwd"] = _median_ms(step, a.min_ms, a.warmup_ms, torch)
            except _lib.FsaError as e:
                print(f"fsa-bench: T={T} G={G}: {e}", file=sys.stderr)
                return EXIT_FAILED
            except (ValueError, TypeError) as e:  # an argument selected_attention refuses: a usage error
                p.error(f"T={T} G={G}: {e}")
            selected = int((topk >= 0).sum())
            flops = 4.0 * selected * G * a.block_size * a.D
            row["tflops_fwd"] = flops / (fwd * 1e-3) / 1e12
            rows.append(row)
            line = f"| {T:6d} | {G:2d} | {a.D:3d} | {fwd:8.3f} | {row['tflops_fwd']:7.1f} |"
            print(line + (f" {row['ms_fwd_bwd']:8.3f} |" if a.backward else ""), flush=True)
    if json_file is not None:
        for row in rows:  # JSON has no NaN or infinity: null instead
            for key, value in row.items():
                if isinstance(value, float) and not math.isfinite(value):
                    row[key] = None
        try:
            json.dump({"gpu": torch.cuda.get_device_name(), "dtype": a.dtype[0], "rows": rows}, json_file,
                      indent=1, allow_nan=False)
            json_file.close()  # flushes: a write that failed fails here
        except OSError as e:  # a full disk: as the C fsa-bench, a failure
            print(f"fsa-bench: cannot write {a.json}: {e.strerror or e}", file=sys.stderr)
            return EXIT_FAILED
    return 0
