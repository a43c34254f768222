"""The numbers of include/fsa.h (its enums and constants) and the Python spellings of those enums.

Kept apart from everything else so that the ABI values sit in one place: python/tests/test_abi.py checks
every FSA_* name that _lib re-exports against the C compiler's view of the header. No imports: _lib takes
all of this module's public names with a star import, so a constant added here is also checked there.
"""

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

TUNE_MODES = {None: FSA_TUNE_DEFAULT, "off": FSA_TUNE_OFF, "on": FSA_TUNE_ON, "force": FSA_TUNE_FORCE}
CHOICE_SOURCES = ("forced", "only_one", "heuristic", "measured")  # by fsa_choice_source value


# fsa/selected.h: a workspace_limit of 0 caps a call's workspace at what the outputs alive during the call leave
# of FSA_WORKSPACE_DEFAULT_BUDGET, at least FSA_WORKSPACE_DEFAULT_MIN (a backward: plus one KV head's dK/dV
# accumulator over every token); FSA_WORKSPACE_UNLIMITED: no cap.
FSA_WORKSPACE_DEFAULT_BUDGET = 89 << 25
FSA_WORKSPACE_DEFAULT_MIN = 256 << 20
FSA_WORKSPACE_UNLIMITED = (1 << 64) - 1
