"""ctypes mirror of the paged-KV-cache structs of include/fsa.h (include/fsa/kvcache.h; no torch needed)."""

import ctypes

from . import _lib

_I64, _U64 = ctypes.c_int64, ctypes.c_uint64


class fsa_kvcache_desc(_lib._Sized):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("dtype", ctypes.c_int),
        ("head_dim", ctypes.c_int),
        ("num_q_heads", ctypes.c_int),
        ("num_kv_heads", ctypes.c_int),
        ("block_size", ctypes.c_int),
        ("top_k", ctypes.c_int),
        ("page_size", ctypes.c_int),
        ("max_batch", ctypes.c_int),
        ("max_query_tokens", ctypes.c_int64),
        ("scale", ctypes.c_float),
        ("splits", ctypes.c_int),
        ("value_dim", ctypes.c_int),  # Dv of the value cache and o; 0 = head_dim
        ("reserved", ctypes.c_int),  # fills the tail padding (never read)
    ]

    _defaults_ = {"head_dim": 128, "block_size": 64, "top_k": 16, "page_size": 64}  # FSA_KVCACHE_DESC_INIT


class fsa_kvcache_args(_lib._Sized):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("num_query_tokens", _I64),
        ("batch", ctypes.c_int),
        ("q", _lib.fsa_tensor),
        ("cu_seqlens_q", _U64),
        ("k_cache", _lib.fsa_tensor), ("k_page_stride", _I64),
        ("v_cache", _lib.fsa_tensor), ("v_page_stride", _I64),
        ("num_pages", _I64),
        ("block_table", _U64), ("block_table_stride", _I64), ("max_pages_per_seq", ctypes.c_int),
        ("seqused_k", _U64),
        ("topk", _lib.fsa_tensor),
        ("topk_length", _U64),
        ("o", _lib.fsa_tensor),
        ("lse", _U64),
        ("workspace", _U64), ("workspace_bytes", ctypes.c_size_t),
    ]



STRUCTS = {"fsa_kvcache_desc": fsa_kvcache_desc, "fsa_kvcache_args": fsa_kvcache_args}

_vp = ctypes.c_void_p

# name -> (restype, argtypes); looked up on first use, so an older libfsa still loads.
SIGNATURES = {
    "fsa_kvcache_plan_create": (ctypes.c_int, [ctypes.POINTER(_vp), _vp, ctypes.POINTER(fsa_kvcache_desc)]),
    "fsa_kvcache_plan_destroy": (None, [_vp]),
    "fsa_kvcache_plan_workspace_size": (ctypes.c_int, [ctypes.POINTER(ctypes.c_size_t), _vp]),
    "fsa_kvcache_plan_workspace_counter_size": (ctypes.c_int, [ctypes.POINTER(ctypes.c_size_t), _vp]),
    "fsa_kvcache_attention": (ctypes.c_int, [_vp, ctypes.POINTER(fsa_kvcache_args), _vp]),
    "fsa_kvcache_plan_choice_get": (ctypes.c_int, [ctypes.POINTER(_lib.fsa_plan_choice), _vp]),
}
