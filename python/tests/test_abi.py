"""The ctypes mirror of fsa.h against the C compiler's view of the header:
struct sizes, field offsets, the ..._INIT defaults and the enum values."""

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from fsa_jit import _lib

HEADER_DIR = Path(__file__).resolve().parents[1] / "fsa-src" / "include"  # the repository's, or an sdist's

# struct -> its ..._INIT macro in fsa.h (None: the header has none)
INIT_MACROS = {
    "fsa_error_info": None,
    "fsa_context_options": "FSA_CONTEXT_OPTIONS_INIT",
    "fsa_cache_stats": "FSA_CACHE_STATS_INIT",
    "fsa_cache_entry_info": None,
    "fsa_selected_attention_desc": "FSA_SELECTED_ATTENTION_DESC_INIT",
    "fsa_tensor": None,
    "fsa_fwd_args": "FSA_FWD_ARGS_INIT",
    "fsa_bwd_args": "FSA_BWD_ARGS_INIT",
    "fsa_plan_choice": "FSA_PLAN_CHOICE_INIT",
}

CONSTANTS = [n for n in dir(_lib) if n.startswith(("FSA_STATUS_", "FSA_CACHE_MODE_", "FSA_JIT_", "FSA_DTYPE_",
                                                   "FSA_ALGORITHM_", "FSA_TUNE_", "FSA_CHOICE_",
                                                   "FSA_OPERATION_"))] + ["FSA_DEVICE_NONE"]
CONSTANTS_64 = ["FSA_WORKSPACE_DEFAULT_BUDGET", "FSA_WORKSPACE_DEFAULT_MIN", "FSA_WORKSPACE_UNLIMITED"]  # uint64_t


def _leaves(struct, prefix=""):
    """(C member designator, ctypes type, ctypes offset) of every scalar field;
    nested structs (fsa_tensor) and arrays of them are walked into."""
    for field, ctype in struct._fields_:
        yield from _member_leaves(prefix + field, ctype, getattr(struct, field).offset)


def _member_leaves(designator, ctype, offset):
    if isinstance(ctype, type) and issubclass(ctype, ctypes.Structure):
        for sub, sub_type, sub_offset in _leaves(ctype, designator + "."):
            yield sub, sub_type, offset + sub_offset
    elif isinstance(ctype, type) and issubclass(ctype, ctypes.Array):
        for i in range(ctype._length_):
            yield from _member_leaves(f"{designator}[{i}]", ctype._type_, offset + i * ctypes.sizeof(ctype._type_))
    else:
        yield designator, ctype, offset


def _py_value(obj, designator):
    for part in designator.split("."):
        name, _, index = part.partition("[")
        obj = getattr(obj, name)
        if index:
            obj = obj[int(index.rstrip("]"))]
    return obj


def _c_value(var, field, ctype):
    if ctype in (ctypes.c_char_p, ctypes.c_void_p) or hasattr(ctype, "_type_") and ctype._type_ == "P":
        return f"(double)({var}.{field} != 0)"
    return f"(double){var}.{field}"


def c_program():
    lines = ["#include <fsa.h>", "#include <stddef.h>", "#include <stdio.h>", "int main(void) {"]
    for name, struct in _lib.STRUCTS.items():
        lines.append(f'printf("size {name} %zu\\n", sizeof({name}));')
        for field, _, _ in _leaves(struct):
            lines.append(f'printf("offset {name}.{field} %zu\\n", offsetof({name}, {field}));')
        macro = INIT_MACROS[name]
        if macro:
            lines.append(f"{{ {name} x = {macro};")
            for field, ctype, _ in _leaves(struct):
                lines.append(f'printf("init {name}.{field} %.17g\\n", {_c_value("x", field, ctype)});')
            lines.append("}")
    for c in CONSTANTS:
        lines.append(f'printf("const {c} %d\\n", (int){c});')
    for c in CONSTANTS_64:
        lines.append(f'printf("const {c} %llu\\n", (unsigned long long){c});')
    lines += ["return 0;", "}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def c_view(tmp_path_factory):
    if not (HEADER_DIR / "fsa.h").is_file():
        pytest.skip("include/fsa.h not found (not running from the source tree)")
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("abi")
    (d / "abi.c").write_text(c_program())
    subprocess.run([cc, "-std=c11", "-I", str(HEADER_DIR), "-o", str(d / "abi"), str(d / "abi.c")],
                   check=True, capture_output=True, text=True)
    out = subprocess.run([str(d / "abi")], check=True, capture_output=True, text=True).stdout
    view = {}
    for line in out.splitlines():
        kind, key, value = line.split()
        view[(kind, key)] = float(value) if kind == "init" else int(value)
    return view


@pytest.mark.parametrize("name", list(_lib.STRUCTS))
def test_struct_layout(c_view, name):
    struct = _lib.STRUCTS[name]
    assert ctypes.sizeof(struct) == c_view[("size", name)], f"sizeof({name})"
    for field, _, offset in _leaves(struct):
        assert offset == c_view[("offset", f"{name}.{field}")], f"{name}.{field}"


@pytest.mark.parametrize("name", [n for n, m in INIT_MACROS.items() if m])
def test_init_defaults(c_view, name):
    struct = _lib.STRUCTS[name]
    x = struct()
    for field, ctype, _ in _leaves(struct):
        value = _py_value(x, field)
        if ctype is ctypes.c_char_p:
            value = 0 if value is None else 1
        assert float(value) == c_view[("init", f"{name}.{field}")], f"{name}.{field}"


def test_constants(c_view):
    for c in CONSTANTS + CONSTANTS_64:
        assert getattr(_lib, c) == c_view[("const", c)], c


def test_status_names_match_the_library(lib):
    for c in CONSTANTS:
        if c.startswith("FSA_STATUS_"):
            assert lib.status_name(getattr(_lib, c)) == c
