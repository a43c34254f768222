"""The ctypes mirror of the compressed- and window-attention structs against the
C compiler's view of fsa.h: sizes, field offsets and the ..._INIT defaults
(no GPU, no torch)."""

import ctypes
import shutil
import subprocess

import pytest

from fsa_jit import _nsa_abi
from test_abi import HEADER_DIR, _c_value, _leaves, _py_value


def _is_pointer(ctype):
    return isinstance(ctype, type) and issubclass(ctype, ctypes._Pointer)


def c_value(field, ctype):
    return f"(double)(x.{field} != 0)" if _is_pointer(ctype) else _c_value("x", field, ctype)


def py_value(x, field, ctype):
    value = _py_value(x, field)
    return float(bool(value)) if _is_pointer(ctype) else float(value)


@pytest.fixture(scope="module")
def c_view(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None or not (HEADER_DIR / "fsa.h").is_file():
        pytest.skip("no C compiler or no include/fsa.h")
    lines = ["#include <fsa.h>", "#include <stddef.h>", "#include <stdio.h>", "int main(void) {"]
    for name, (struct, macro) in _nsa_abi.STRUCTS.items():
        lines.append(f'printf("size {name} %zu\\n", sizeof({name}));')
        lines.append(f"{{ {name} x = {macro};")
        for field, ctype, _ in _leaves(struct):
            lines.append(f'printf("offset {name}.{field} %zu\\n", offsetof({name}, {field}));')
            lines.append(f'printf("init {name}.{field} %.17g\\n", {c_value(field, ctype)});')
        lines.append("}")
    lines += ["return 0;", "}"]
    d = tmp_path_factory.mktemp("nsa_abi")
    (d / "abi.c").write_text("\n".join(lines) + "\n")
    subprocess.run([cc, "-std=c11", "-I", str(HEADER_DIR), "-o", str(d / "abi"), str(d / "abi.c")],
                   check=True, capture_output=True, text=True)
    out = subprocess.run([str(d / "abi")], check=True, capture_output=True, text=True).stdout
    return {(k, key): float(v) if k == "init" else int(v) for k, key, v in (line.split() for line in out.splitlines())}


@pytest.mark.parametrize("name", list(_nsa_abi.STRUCTS))
def test_the_mirror_has_the_header_layout_and_defaults(c_view, name):
    struct = _nsa_abi.STRUCTS[name][0]
    assert ctypes.sizeof(struct) == c_view[("size", name)], f"sizeof({name})"
    x = struct()
    for field, ctype, offset in _leaves(struct):
        assert offset == c_view[("offset", f"{name}.{field}")], f"{name}.{field}"
        assert py_value(x, field, ctype) == c_view[("init", f"{name}.{field}")], f"{name}.{field} default"


def test_every_declared_function_is_in_the_library(lib):
    for name in _nsa_abi.SIGNATURES:
        assert _nsa_abi.function(lib, name) is not None
