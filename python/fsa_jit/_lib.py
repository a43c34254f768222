"""Finding and loading libfsa, and the facade of the package's binding of include/fsa.h.

The rest of the package and its tests use everything as _lib.X; the parts live by concern in
_constants (the numbers of fsa.h), _parse (argument parsers), _structs (the struct mirrors),
_functions (the function signatures and Library) and _errors (FsaError, FsaLibraryNotFound), and
are re-exported here. Finding and loading stay in this module: the tests patch get, _library,
candidate_paths and __file__ on _lib, and the functions that read them must read this module's globals.

Nothing here imports torch: the offline parts of the package (precompile,
cache inspection) work on a machine without it.
"""

import ctypes
import ctypes.util
import glob
import os
import sys
import threading
from pathlib import Path

# Every public name of _constants: test_abi takes the FSA_* names from dir(_lib).
from ._constants import *  # noqa: F401,F403
from ._errors import FsaError, FsaLibraryNotFound  # noqa: F401
from ._functions import OPTIONAL_FUNCTIONS, REQUIRED_FUNCTIONS, Library, _text  # noqa: F401
from ._parse import (  # noqa: F401
    DTYPE_NAMES,
    DTYPE_SPELLINGS,
    INT32_MAX,
    dtype_code,
    parse_bytes,
    parse_workspace_limit,
    require_int,
    require_scale,
    workspace_limit_field,
)
from ._structs import (  # noqa: F401
    STRUCTS,
    _Sized,
    fsa_bwd_args,
    fsa_cache_entry_info,
    fsa_cache_stats,
    fsa_cache_visit_fn,
    fsa_context_options,
    fsa_error_info,
    fsa_fwd_args,
    fsa_plan_choice,
    fsa_selected_attention_desc,
    fsa_tensor,
)

# --------------------------------------------------------------- discovery


def _repo_root():
    # python/fsa_jit/_lib.py -> the repository (when run from the source tree)
    return Path(__file__).resolve().parents[2]


def c_source_dir():
    """The C project beside the package: python/fsa-src in the repository (links to it), fsa-src in an sdist."""
    return Path(__file__).resolve().parents[1] / "fsa-src"


def source_tree_version():
    """The VERSION file of the source tree this package sits in ("0+unknown" outside one)."""
    try:
        return (c_source_dir() / "VERSION").read_text().split()[0]
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


def _package_folders():
    package = sys.modules.get(__package__)
    return list(getattr(package, "__path__", None) or [str(Path(__file__).resolve().parent)])


def _mtime(path):
    """The modification time of what path names, or None where nothing is there (a dangling link)."""
    try:
        return os.path.getmtime(path)
    except OSError:
        return None


def candidate_paths():
    """Where libfsa is looked for, in order (without FSA_LIBRARY)."""
    paths = []
    # The wheel's own copy, in every folder of the package: an editable install puts the built library in
    # site-packages/fsa_jit while this file stays in the source tree.
    for folder in _package_folders():
        paths += sorted(str(p) for p in Path(folder).glob("libfsa.so*"))
    found = ctypes.util.find_library("fsa")
    if found:
        paths.append(found)
    paths += [soname(), "libfsa.so"]  # the dynamic loader's own search path
    root = _repo_root()
    if (root / "include" / "fsa.h").is_file():
        builds = glob.glob(str(root / "build*" / "libfsa.so*")) + glob.glob(str(root / "build*" / "*" / "libfsa.so*"))
        # Newest build first: a stale build folder should not win. A link whose file is gone (a build
        # folder half rebuilt) is no candidate, and never stops the search.
        dated = [(_mtime(p), p) for p in builds]
        paths += [p for _, p in sorted((d for d in dated if d[0] is not None), reverse=True)]
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
