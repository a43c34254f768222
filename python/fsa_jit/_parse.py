"""The small parsers of the operators' and tools' arguments: dtype spellings, byte counts and the
workspace cap. Pure Python on the constants of fsa.h, without libfsa or torch, so that argument errors
are raised before anything is loaded.
"""

from ._constants import FSA_DTYPE_BF16, FSA_DTYPE_F16, FSA_WORKSPACE_UNLIMITED

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
