"""The small parsers of the operators' and tools' arguments: dtype spellings, byte counts and the
workspace cap. Pure Python on the constants of fsa.h, without libfsa or torch, so that argument errors
are raised before anything is loaded.
"""

import math
import numbers

from ._constants import FSA_DTYPE_BF16, FSA_DTYPE_F16, FSA_WORKSPACE_UNLIMITED

# The range of the descriptors' int fields: ctypes would keep the low 32 bits of a larger Python int
# silently (2**32 + 128 becomes 128), so such a value is refused here and libfsa reports its own limits.
INT32_MAX = 2**31 - 1

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


def require_int(name, value, low, high=None):
    """An int (bool excluded; TypeError) in low..high (ValueError); high None: up to INT32_MAX, what the
    descriptors' int fields hold."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be {bound}, got {value}")
    if high is None and value > INT32_MAX:
        raise ValueError(f"{name} {value} is past int32: at most {INT32_MAX}")


# The positive numbers that stay positive and finite in float32 (rounding to nearest even): above half the
# smallest subnormal and below FLT_MAX plus half an ulp. Plain comparisons, which torch.compile traces.
_FLOAT32_ZERO_BELOW = 2.0**-150
_FLOAT32_INF_FROM = 2.0**128 - 2.0**103


def require_scale(scale):
    """None, or a positive finite real number that stays positive and finite in float32, the plans' field
    (where 0 means the default: a scale of 1e-46 would silently become 1/sqrt(head_dim))."""
    if scale is None:
        return
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    if not 0 < scale < math.inf:  # comparisons, not math.isfinite: a compiled call's SymFloat traces through them
        raise ValueError(f"scale must be a positive finite number (None = 1/sqrt(head_dim)), got {scale}")
    try:
        as_float = float(scale)  # numpy scalars compare in float64
    except OverflowError:  # an int past float64 (10**400)
        as_float = math.inf
    if not _FLOAT32_ZERO_BELOW < as_float < _FLOAT32_INF_FROM:
        raise ValueError(f"scale {scale} is 0 or infinite in float32, as the plan holds it: it must be a positive "
                         "finite float32")


def is_decimal(text):
    """Whether text is a whole number as the C tools spell it: ASCII digits only (str.isdigit and int() also
    take other scripts' digits; int() a sign, spaces and '_')."""
    return text.isascii() and text.isdigit()


_BYTE_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(value, name="bytes"):
    """A byte count: None (0), an int >= 0, or a string such as '2G' (suffixes K, M, G, T: powers of
    1024, as the tools' options take them)."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, a string such as '2G', or None; got {value!r}")
    if isinstance(value, numbers.Integral):  # numpy integers too, as the other integer arguments
        if value < 0:
            raise ValueError(f"{name} must not be negative, got {value}")
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        digits = text.rstrip("kKmMgGtT")
        suffix = text[len(digits):].upper()
        if is_decimal(digits) and suffix in _BYTE_SUFFIXES:
            return int(digits) * _BYTE_SUFFIXES[suffix]
        raise ValueError(f"{name}: {value!r} is not a byte count (e.g. 536870912, '512M', '2G')")
    raise TypeError(f"{name} must be an int, a string such as '2G', or None; got {type(value).__name__}")


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
