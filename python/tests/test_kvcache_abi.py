"""The ctypes mirror of the paged-KV-cache structs against the C compiler's
view of fsa.h: sizes, field offsets and the ..._INIT defaults (no GPU, no torch)."""

import ctypes
import shutil
import subprocess

import pytest

from fsa_jit import _kvcache_abi, _nsa_abi
from fsa_jit._kvcache_abi import STRUCTS
from test_abi import HEADER_DIR, _c_value, _leaves, _py_value

INIT_MACROS = {"fsa_kvcache_desc": "FSA_KVCACHE_DESC_INIT", "fsa_kvcache_args": "FSA_KVCACHE_ARGS_INIT"}


@pytest.fixture(scope="module")
def c_view(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None or not (HEADER_DIR / "fsa.h").is_file():
        pytest.skip("no C compiler or no include/fsa.h")
    lines = ["#include <fsa.h>", "#include <stddef.h>", "#include <stdio.h>", "int main(void) {"]
    for name, struct in STRUCTS.items():
        lines.append(f'printf("size {name} %zu\\n", sizeof({name}));')
        lines.append(f"{{ {name} x = {INIT_MACROS[name]};")
        for field, ctype, _ in _leaves(struct):
            lines.append(f'printf("offset {name}.{field} %zu\\n", offsetof({name}, {field}));')
            lines.append(f'printf("init {name}.{field} %.17g\\n", {_c_value("x", field, ctype)});')
        lines.append("}")
    lines += ["return 0;", "}"]
    d = tmp_path_factory.mktemp("kvcache_abi")
    (d / "abi.c").write_text("\n".join(lines) + "\n")
    subprocess.run([cc, "-std=c11", "-I", str(HEADER_DIR), "-o", str(d / "abi"), str(d / "abi.c")],
                   check=True, capture_output=True, text=True)
    out = subprocess.run([str(d / "abi")], check=True, capture_output=True, text=True).stdout
    return {(k, key): float(v) if k == "init" else int(v) for k, key, v in (line.split() for line in out.splitlines())}


@pytest.mark.parametrize("name", list(STRUCTS))
def test_the_mirror_has_the_header_layout_and_defaults(c_view, name):
    struct = STRUCTS[name]
    assert ctypes.sizeof(struct) == c_view[("size", name)], f"sizeof({name})"
    x = struct()
    for field, _, offset in _leaves(struct):
        assert offset == c_view[("offset", f"{name}.{field}")], f"{name}.{field}"
        assert float(_py_value(x, field)) == c_view[("init", f"{name}.{field}")], f"{name}.{field} default"


def test_every_declared_function_is_in_the_library(lib):
    for name in _kvcache_abi.SIGNATURES:
        assert _nsa_abi.function(lib, name, _kvcache_abi.SIGNATURES) is not None
