"""Finding and loading libfsa, and the ctypes mirror of include/fsa.h.

Nothing here imports torch: the offline parts of the package (precompile,
cache inspection) work on a machine without it.
"""

import ctypes
import ctypes.util
import glob
import os
import threading
from pathlib import Path

# ---------------------------------------------------------------- constants

FSA_DEVICE_NONE = -1

# fsa_status: append-only table of the header (the numbers are ABI).
FSA_STATUS_OK = 0
FSA_STATUS_INVALID_ARGUMENT = 1
FSA_STATUS_NULL_POINTER = 2
FSA_STATUS_STRUCT_SIZE = 3
FSA_STATUS_OUT_OF_MEMORY = 4
FSA_STATUS_NO_DRIVER = 5
FSA_STATUS_NO_DEVICE = 6
FSA_STATUS_DRIVER_ERROR = 7
FSA_STATUS_NO_NVRTC = 8
FSA_STATUS_COMPILE_FAILED = 9
FSA_STATUS_JIT_DISABLED = 10
FSA_STATUS_CACHE_IO = 11
FSA_STATUS_RENDER_FAILED = 12
FSA_STATUS_UNSUPPORTED = 13
FSA_STATUS_UNSUPPORTED_DEVICE = 14
FSA_STATUS_MISALIGNED = 15
FSA_STATUS_WORKSPACE_TOO_SMALL = 16
FSA_STATUS_NOT_FOUND = 17
FSA_STATUS_INTERNAL = 18

FSA_CACHE_MODE_DEFAULT = 0
FSA_CACHE_MODE_READ_WRITE = 1
FSA_CACHE_MODE_READ_ONLY = 2
FSA_CACHE_MODE_OFF = 3

FSA_JIT_DEFAULT = 0
FSA_JIT_ON = 1
FSA_JIT_OFF = 2

FSA_TUNE_DEFAULT = 0  # fsa_tune_mode: $FSA_TUNE decides
FSA_TUNE_OFF = 1
FSA_TUNE_ON = 2
FSA_TUNE_FORCE = 3

FSA_CHOICE_FORCED = 0
FSA_CHOICE_ONLY_ONE = 1
FSA_CHOICE_HEURISTIC = 2
FSA_CHOICE_MEASURED = 3

FSA_OPERATION_FORWARD = 0
FSA_OPERATION_BACKWARD = 1

FSA_DTYPE_BF16 = 0
FSA_DTYPE_F16 = 1

FSA_ALGORITHM_AUTO = 0
FSA_ALGORITHM_FSA = 1
FSA_ALGORITHM_NSA = 2

ALGORITHMS = {"auto": FSA_ALGORITHM_AUTO, "fsa": FSA_ALGORITHM_FSA, "nsa": FSA_ALGORITHM_NSA}

# The one set of dtype spellings, shared with the C tools' --dtype.
DTYPE_SPELLINGS = {
    "bf16": FSA_DTYPE_BF16, "bfloat16": FSA_DTYPE_BF16,
    "fp16": FSA_DTYPE_F16, "f16": FSA_DTYPE_F16, "float16": FSA_DTYPE_F16, "half": FSA_DTYPE_F16,
}
DTYPE_NAMES = {FSA_DTYPE_BF16: "bf16", FSA_DTYPE_F16: "f16"}


def dtype_code(d):
    """FSA_DTYPE_* of a spelling in DTYPE_SPELLINGS or a torch dtype (torch.bfloat16, torch.float16)."""
    name = str(d).lower()
    if name.startswith("torch."):
        name = name[len("torch."):]
    if name not in DTYPE_SPELLINGS:
        raise ValueError(f"dtype {d!r}: expected one of {', '.join(DTYPE_SPELLINGS)} (or torch.bfloat16, torch.float16)")
    return DTYPE_SPELLINGS[name]

_BYTE_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(value, name="bytes"):
    """A byte count: None (0), an int >= 0, or a string such as '2G' (suffixes K, M, G, T: powers of
    1024, as the tools' options take them)."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, a string such as '2G', or None; got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{name} must not be negative, got {value}")
        return value
    if isinstance(value, str):
        text = value.strip()
        digits = text.rstrip("kKmMgGtT")
        suffix = text[len(digits):].upper()
        if digits.isdigit() and suffix in _BYTE_SUFFIXES:
            return int(digits) * _BYTE_SUFFIXES[suffix]
        raise ValueError(f"{name}: {value!r} is not a byte count (e.g. 536870912, '512M', '2G')")
    raise TypeError(f"{name} must be an int, a string such as '2G', or None; got {type(value).__name__}")


# fsa.h: a workspace_limit of 0 caps a call's workspace at what the outputs alive during the call leave
# of FSA_WORKSPACE_DEFAULT_BUDGET, at least FSA_WORKSPACE_DEFAULT_MIN; FSA_WORKSPACE_UNLIMITED: no cap.
FSA_WORKSPACE_DEFAULT_BUDGET = 89 << 25
FSA_WORKSPACE_DEFAULT_MIN = 256 << 20
FSA_WORKSPACE_UNLIMITED = (1 << 64) - 1


def parse_workspace_limit(value, name="workspace_limit"):
    """A workspace cap as the operators take it: None or 0 -> 0 (libfsa's default cap, within
    FSA_WORKSPACE_DEFAULT_BUDGET with the outputs alive during the call); "unlimited" or math.inf -> -1 (no cap; torch passes int64, so
    the descriptor's FSA_WORKSPACE_UNLIMITED is spelled -1 until the plan is made); else bytes
    as parse_bytes takes them."""
    if isinstance(value, float) and value == float("inf"):
        return -1
    if isinstance(value, str) and value.strip().lower() == "unlimited":
        return -1
    limit = parse_bytes(value, name)
    if limit >= 1 << 63:
        raise ValueError(f"{name}: {value!r} is past int64; use 'unlimited' for no cap")
    return limit


def workspace_limit_field(limit):
    """The descriptor's workspace_limit for an operator's limit (-1 = no cap)."""
    return FSA_WORKSPACE_UNLIMITED if limit < 0 else limit


# ------------------------------------------------------------------ structs
# Same field order and types as fsa.h; enums are int, device pointers uint64.


class _Sized(ctypes.Structure):
    """A struct that starts with struct_size. Like its ..._INIT macro, a new
    instance is zero except struct_size (its ctypes size) and `_defaults_`;
    keyword arguments set fields."""

    _defaults_ = {}

    def __init__(self, **fields):
        super().__init__()
        self.struct_size = ctypes.sizeof(self)
        for name, value in {**self._defaults_, **fields}.items():
            setattr(self, name, value)


class fsa_error_info(ctypes.Structure):
    _fields_ = [
        ("status", ctypes.c_int),
        ("stage", ctypes.c_char_p),
        ("kernel", ctypes.c_char_p),
        ("key", ctypes.c_char_p),
        ("target", ctypes.c_char_p),
        ("message", ctypes.c_char_p),
        ("log", ctypes.c_char_p),
    ]


class fsa_context_options(_Sized):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("device", ctypes.c_int),
        ("target", ctypes.c_char_p),
        ("cache_dir", ctypes.c_char_p),
        ("cache_mode", ctypes.c_int),
        ("jit", ctypes.c_int),
        ("log", ctypes.c_int),
        ("check", ctypes.c_int64),
        ("tune", ctypes.c_int),
    ]


class fsa_plan_choice(_Sized):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("algorithm", ctypes.c_int),
        ("source", ctypes.c_int),
        ("reason", ctypes.c_char_p),
        ("variant", ctypes.c_char_p),
        ("bucket_tokens", ctypes.c_int64),
        ("candidates", ctypes.c_int),
        ("will_measure", ctypes.c_int),
        ("splits", ctypes.c_int),
    ]


TUNE_MODES = {None: FSA_TUNE_DEFAULT, "off": FSA_TUNE_OFF, "on": FSA_TUNE_ON, "force": FSA_TUNE_FORCE}
CHOICE_SOURCES = ("forced", "only_one", "heuristic", "measured")  # by fsa_choice_source value


class fsa_cache_stats(_Sized):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("memory_hits", ctypes.c_uint64),
        ("disk_hits", ctypes.c_uint64),
        ("compiles", ctypes.c_uint64),
        ("compile_ms", ctypes.c_double),
        ("corrupt_entries", ctypes.c_uint64),
        ("write_failures", ctypes.c_uint64),
    ]


class fsa_cache_entry_info(ctypes.Structure):
    _fields_ = [
        ("path", ctypes.c_char_p),
        ("name", ctypes.c_char_p),
        ("target", ctypes.c_char_p),
        ("bytes", ctypes.c_uint64),
        ("mtime", ctypes.c_int64),
        ("valid", ctypes.c_int),
        ("deleted", ctypes.c_int),
    ]


fsa_cache_visit_fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(fsa_cache_entry_info),
                                      ctypes.c_void_p)


class fsa_selected_attention_desc(_Sized):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("dtype", ctypes.c_int),
        ("head_dim", ctypes.c_int),
        ("num_q_heads", ctypes.c_int),
        ("num_kv_heads", ctypes.c_int),
        ("block_size", ctypes.c_int),
        ("top_k", ctypes.c_int),
        ("scale", ctypes.c_float),
        ("algorithm", ctypes.c_int),
        ("workspace_limit", ctypes.c_uint64),
        ("backward", ctypes.c_int),
        ("value_dim", ctypes.c_int64),  # Dv of v and o; 0 = head_dim
    ]
    _defaults_ = {"head_dim": 128, "block_size": 64, "top_k": 16}  # FSA_SELECTED_ATTENTION_DESC_INIT


class fsa_tensor(ctypes.Structure):
    """A device tensor: row (t, h) at element ptr + t * token_stride + h * head_stride."""

    _fields_ = [
        ("ptr", ctypes.c_uint64),
        ("token_stride", ctypes.c_int64),
        ("head_stride", ctypes.c_int64),
    ]


def _call_args(*tensors):
    """The fields of fsa_fwd_args / fsa_bwd_args around their tensor views."""
    return (
        [
            ("struct_size", ctypes.c_size_t),
            ("total_tokens", ctypes.c_int64),
            ("batch", ctypes.c_int),
            ("max_seqlen", ctypes.c_int),
        ]
        + [(name, fsa_tensor) for name in tensors]
        + [
            ("topk", fsa_tensor),
            ("cu_seqlens", ctypes.c_uint64),
            ("lse", ctypes.c_uint64),
            ("workspace", ctypes.c_uint64),
            ("workspace_bytes", ctypes.c_size_t),
        ]
    )


class fsa_fwd_args(_Sized):
    _fields_ = _call_args("q", "k", "v", "o")


class fsa_bwd_args(_Sized):
    _fields_ = _call_args("q", "k", "v", "o", "dout", "dq", "dk", "dv")


STRUCTS = {
    "fsa_error_info": fsa_error_info,
    "fsa_context_options": fsa_context_options,
    "fsa_cache_stats": fsa_cache_stats,
    "fsa_cache_entry_info": fsa_cache_entry_info,
    "fsa_selected_attention_desc": fsa_selected_attention_desc,
    "fsa_tensor": fsa_tensor,
    "fsa_fwd_args": fsa_fwd_args,
    "fsa_bwd_args": fsa_bwd_args,
    "fsa_plan_choice": fsa_plan_choice,
}

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

# ------------------------------------------------------------------ errors


class FsaLibraryNotFound(OSError):
    """libfsa could not be found or loaded."""


class FsaError(RuntimeError):
    """A libfsa call returned a status other than FSA_STATUS_OK."""

    def __init__(self, status, name, message, function=None, info=None):
        self.status = status
        self.name = name  # "FSA_STATUS_UNSUPPORTED"
        self.message = message  # fsa_last_error()
        self.function = function
        self.info = info or {}  # fsa_last_error_info() fields
        where = f"{function}: " if function else ""
        super().__init__(f"{where}{name} ({status}): {message}")


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


# --------------------------------------------------------------- discovery


def _repo_root():
    # python/fsa_jit/_lib.py -> the repository (when run from the source tree)
    return Path(__file__).resolve().parents[2]


def source_tree_version():
    """The VERSION file of the source tree this package sits in ("0+unknown" outside one)."""
    try:
        return (_repo_root() / "VERSION").read_text().split()[0]
    except (OSError, IndexError):
        return "0+unknown"


def package_version():
    try:
        from ._version import __version__  # written by the wheel build
    except ImportError:
        return source_tree_version()
    return __version__


def soname(version=None):
    """libfsa's SONAME for a version: libfsa.so.0.MINOR while the major is 0, else libfsa.so.MAJOR."""
    parts = (version or package_version()).split(".")
    if len(parts) < 2 or not parts[0].isdigit():
        return "libfsa.so"
    return f"libfsa.so.{parts[0]}.{parts[1]}" if parts[0] == "0" else f"libfsa.so.{parts[0]}"


def candidate_paths():
    """Where libfsa is looked for, in order (without FSA_LIBRARY)."""
    paths = []
    here = Path(__file__).resolve().parent
    paths += sorted(str(p) for p in here.glob("libfsa.so*"))  # the wheel's own copy
    found = ctypes.util.find_library("fsa")
    if found:
        paths.append(found)
    paths += [soname(), "libfsa.so"]  # the dynamic loader's own search path
    root = _repo_root()
    if (root / "include" / "fsa.h").is_file():
        builds = glob.glob(str(root / "build*" / "libfsa.so*")) + glob.glob(str(root / "build*" / "*" / "libfsa.so*"))
        # Newest build first: a stale build folder should not win.
        builds.sort(key=lambda p: os.path.getmtime(p), reverse=True)
        paths += builds
    unique = []
    for p in paths:
        if p not in unique:
            unique.append(p)
    return unique


def python_site_dirs():
    """Directories holding pip's nvidia/ packages (site-packages), where libfsa looks for
    the NVRTC of the nvidia-cuda-nvrtc wheel that PyTorch installs."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    locations = list(spec.submodule_search_locations or []) if spec else []
    dirs = []
    for loc in locations:
        parent = str(Path(loc).parent)
        if parent not in dirs:
            dirs.append(parent)
    return dirs


def _tell_libfsa_where_pip_nvrtc_is():
    # Read by libfsa when it first needs NVRTC; a value set by the user wins.
    if "FSA_PYTHON_SITE_DIRS" not in os.environ:
        dirs = python_site_dirs()
        if dirs:
            os.environ["FSA_PYTHON_SITE_DIRS"] = os.pathsep.join(dirs)


def load_library(path=None):
    """Loads libfsa: `path`, else $FSA_LIBRARY, else the first candidate that loads."""
    _tell_libfsa_where_pip_nvrtc_is()
    explicit = path or os.environ.get("FSA_LIBRARY")
    if explicit:
        try:
            return Library(ctypes.CDLL(explicit), explicit)
        except OSError as e:
            source = "path" if path else "FSA_LIBRARY"
            raise FsaLibraryNotFound(f"libfsa could not be loaded from {source}={explicit}: {e}") from None
    tried = []
    for p in candidate_paths():
        try:
            return Library(ctypes.CDLL(p), p)
        except OSError as e:
            tried.append(f"  {p}: {e}")
    raise FsaLibraryNotFound(
        "libfsa was not found. Tried:\n" + "\n".join(tried) + "\n"
        "Build it (cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build) and set "
        "FSA_LIBRARY=/path/to/libfsa.so, or install it where the dynamic loader finds it."
    )


_library = None
_library_lock = threading.Lock()


def get():
    """The process's Library, loaded on first use."""
    global _library
    if _library is None:
        with _library_lock:
            if _library is None:
                _library = load_library()
    return _library
