"""The ctypes mirrors of the public structs of include/fsa.h (python/tests/test_abi.py checks their sizes,
offsets and ..._INIT defaults against the C compiler). _nsa_abi and _kvcache_abi build theirs from
_Sized and fsa_tensor here.
"""

import ctypes

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
        ("reserved", ctypes.c_int),  # fills the tail padding (never read)
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
        ("reserved", ctypes.c_int),  # fills the tail padding (written 0)
    ]


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
        ("loaded", ctypes.c_int),
        ("record", ctypes.c_int),
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
    _fields_ = _call_args("q", "k", "v", "o", "dout", "dq", "dk", "dv") + [
        ("dq_add", fsa_tensor), ("gate", fsa_tensor), ("gate_grad", fsa_tensor)]


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
