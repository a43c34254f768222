"""ctypes mirror of the compressed-attention, window-attention and gate structs of include/fsa.h (its parts
include/fsa/compressed.h, window.h and gate.h; no torch needed)."""

import ctypes

from . import _lib

_I64, _U64, _int = ctypes.c_int64, ctypes.c_uint64, ctypes.c_int
_tensor = _lib.fsa_tensor


class fsa_compressed_attention_desc(_lib._Sized):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("dtype", _int),
        ("head_dim", _int),
        ("value_dim", _int),
        ("num_q_heads", _int),
        ("num_kv_heads", _int),
        ("kernel_size", _int),
        ("stride", _int),
        ("scale", ctypes.c_float),
        ("top_k", _int),
        ("block_size", _int),
        ("init_blocks", _int),
        ("local_blocks", _int),
        ("backward", _int),
        ("reserved", _int),  # fills the tail padding (never read)
    ]
    # FSA_COMPRESSED_ATTENTION_DESC_INIT
    _defaults_ = {"head_dim": 128, "kernel_size": 32, "stride": 16, "top_k": 16, "block_size": 64,
                  "init_blocks": 1, "local_blocks": 2}


def _compressed_args(tensors, tail):
    """The fields of fsa_compressed_fwd_args / _bwd_args: counts, the tensor views, then `tail`."""
    return ([("struct_size", ctypes.c_size_t), ("total_tokens", _I64), ("total_compressed", _I64), ("batch", _int)]
            + [(name, _tensor) for name in tensors] + tail)


class fsa_compressed_fwd_args(_lib._Sized):
    _fields_ = _compressed_args(("q", "k", "v", "o"), [
        ("lse", _U64), ("cu_seqlens", _U64), ("cu_seqlens_c", _U64), ("topk", _tensor),
        ("workspace", _U64), ("workspace_bytes", ctypes.c_size_t)])


class fsa_compressed_bwd_args(_lib._Sized):
    _fields_ = _compressed_args(("q", "k", "v", "o", "dout", "dq", "dk", "dv"), [
        ("lse", _U64), ("cu_seqlens", _U64), ("cu_seqlens_c", _U64),
        ("workspace", _U64), ("workspace_bytes", ctypes.c_size_t), ("dq_add", _tensor), ("gate", _tensor),
        ("gate_grad", _tensor)])


class fsa_window_attention_desc(_lib._Sized):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("dtype", _int),
        ("head_dim", _int),
        ("value_dim", _int),
        ("num_q_heads", _int),
        ("num_kv_heads", _int),
        ("window", _int),
        ("scale", ctypes.c_float),
        ("head_windows", ctypes.POINTER(ctypes.c_int32)),  # host array [num_q_heads] or NULL
        ("backward", _int),
        ("reserved", _int),  # fills the tail padding (never read)
    ]
    _defaults_ = {"head_dim": 128, "window": 512}  # FSA_WINDOW_ATTENTION_DESC_INIT


MAX_HEAD_WINDOWS = 256  # FSA_WINDOW_MAX_HEAD_WINDOWS


class fsa_window_fwd_args(_lib._Sized):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("total_tokens", _I64),
        ("batch", _int),
        ("q", _tensor), ("k", _tensor), ("v", _tensor), ("o", _tensor),
        ("cu_seqlens", _U64),
        ("lse", _U64),
    ]


class fsa_window_bwd_args(_lib._Sized):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("total_tokens", _I64),
        ("batch", _int),
        ("q", _tensor), ("k", _tensor), ("v", _tensor), ("o", _tensor), ("dout", _tensor),
        ("dq", _tensor), ("dk", _tensor), ("dv", _tensor),
        ("lse", _U64),
        ("cu_seqlens", _U64),
        ("workspace", _U64), ("workspace_bytes", ctypes.c_size_t),
        ("dq_add", _tensor),
        ("gate", _tensor), ("gate_grad", _tensor),
    ]


class fsa_gate_desc(_lib._Sized):
    _fields_ = [("struct_size", ctypes.c_size_t), ("dtype", _int), ("value_dim", _int)]
    _defaults_ = {"value_dim": 128}  # FSA_GATE_DESC_INIT


class fsa_gate_args(_lib._Sized):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("total_tokens", _I64),
        ("num_heads", _int),
        ("out", _tensor * 3), ("gate", _tensor * 3),
        ("o", _tensor), ("dout", _tensor), ("dout_branch", _tensor * 3),
        ("dgate", _U64),
    ]


# struct name -> (ctypes mirror, its ..._INIT macro)
STRUCTS = {
    "fsa_compressed_attention_desc": (fsa_compressed_attention_desc, "FSA_COMPRESSED_ATTENTION_DESC_INIT"),
    "fsa_compressed_fwd_args": (fsa_compressed_fwd_args, "FSA_COMPRESSED_FWD_ARGS_INIT"),
    "fsa_compressed_bwd_args": (fsa_compressed_bwd_args, "FSA_COMPRESSED_BWD_ARGS_INIT"),
    "fsa_window_attention_desc": (fsa_window_attention_desc, "FSA_WINDOW_ATTENTION_DESC_INIT"),
    "fsa_window_fwd_args": (fsa_window_fwd_args, "FSA_WINDOW_FWD_ARGS_INIT"),
    "fsa_window_bwd_args": (fsa_window_bwd_args, "FSA_WINDOW_BWD_ARGS_INIT"),
    "fsa_gate_desc": (fsa_gate_desc, "FSA_GATE_DESC_INIT"),
    "fsa_gate_args": (fsa_gate_args, "FSA_GATE_ARGS_INIT"),
}

_vp = ctypes.c_void_p
_P = ctypes.POINTER
_size = _P(ctypes.c_size_t)

# name -> (restype, argtypes); looked up on first use, so an older libfsa still loads.
SIGNATURES = {
    "fsa_compressed_plan_create": (_int, [_P(_vp), _vp, _P(fsa_compressed_attention_desc)]),
    "fsa_compressed_plan_destroy": (None, [_vp]),
    "fsa_compressed_plan_workspace_size": (_int, [_size, _vp, _I64, _int]),
    "fsa_compressed_plan_workspace_size_bwd": (_int, [_size, _vp, _I64, _int]),
    "fsa_compressed_attention_fwd": (_int, [_vp, _P(fsa_compressed_fwd_args), _vp]),
    "fsa_compressed_attention_bwd": (_int, [_vp, _P(fsa_compressed_bwd_args), _vp]),
    "fsa_window_plan_create": (_int, [_P(_vp), _vp, _P(fsa_window_attention_desc)]),
    "fsa_window_plan_destroy": (None, [_vp]),
    "fsa_window_attention_fwd": (_int, [_vp, _P(fsa_window_fwd_args), _vp]),
    "fsa_window_plan_workspace_size_bwd": (_int, [_size, _vp, _I64, _int]),
    "fsa_window_attention_bwd": (_int, [_vp, _P(fsa_window_bwd_args), _vp]),
    "fsa_gate_plan_create": (_int, [_P(_vp), _vp, _P(fsa_gate_desc)]),
    "fsa_gate_plan_destroy": (None, [_vp]),
    "fsa_gate_fwd": (_int, [_vp, _P(fsa_gate_args), _vp]),
    "fsa_gate_bwd": (_int, [_vp, _P(fsa_gate_args), _vp]),
}


def function(lib, name, signatures=SIGNATURES):
    """libfsa's `name` with its signature (from `signatures`) declared; RuntimeError when this build lacks it."""
    fn = getattr(lib, name, None)
    if fn is None:
        fn = getattr(lib.cdll, name, None)
        if fn is None:
            raise RuntimeError(f"{lib.path} has no {name}: rebuild libfsa from a version that has it")
        fn.restype, fn.argtypes = signatures[name]
        setattr(lib, name, fn)
    return fn
