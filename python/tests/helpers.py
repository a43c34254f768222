"""Test inputs shared by the test files (imported as a plain module: pytest
puts this folder on sys.path). torch is imported inside the functions that
use it: conftest imports this module, and the tests that need no torch (the
ABI, CLI and loader tests) must run where torch is not installed."""

import math
import os

import pytest

# What poisoned int32 outputs (the block selection) hold before libfsa writes them: no block number and
# not -1 (tests/conftest.py: poisoned_outputs).
POISON_INT32 = -0x21524111  # 0xDEADBEEF


def cu_seqlens_of(seqlens):
    cu = [0]
    for n in seqlens:
        cu.append(cu[-1] + n)
    return cu


def random_selection(cu, Hkv, K, BK, gen, duplicates=False):
    """int32 [Hkv, T, K] on the CPU: distinct blocks of -1 .. own block + 2 in random
    order (so -1 in the middle, future blocks and blocks past the sequence's end
    all occur), a -1 tail when the row is short; with duplicates, some rows
    repeat a block (the reference counts it once; kernels need not accept it)."""
    import torch

    T = cu[-1]
    topk = torch.full((Hkv, T, K), -1, dtype=torch.int32)
    for b in range(len(cu) - 1):
        for t in range(cu[b], cu[b + 1]):
            c = (t - cu[b]) // BK
            for h in range(Hkv):
                row = torch.randperm(c + 4, generator=gen)[:K] - 1
                if duplicates and K >= 2 and torch.rand(1, generator=gen).item() < 0.3:
                    row[-1] = row[0]
                topk[h, t, : len(row)] = row
    return topk


def on_meta(problem):
    """A problem's tensors on the meta device (shapes without memory), its other arguments as they are."""
    import torch

    return {name: t.to("meta") if isinstance(t, torch.Tensor) else t for name, t in problem.items()}


def rel_err(a, b):
    """||a - b|| / ||b|| in float64 (a and b are torch tensors)."""
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def check_rows(o, want, tol, what="o", floor=0.1):
    """Each (token, head) row of o [T, H, Dv] is close to want's: its error's norm, relative to the larger
    of the row's norm and `floor` x the rms row norm of want, below 3 x tol (tol: the whole tensor's relative
    tolerance). A whole-tensor norm hides a few wrong rows; this finds them (NaN rows included). A [T, H]
    tensor (a gate's gradient) is taken as rows of one element, an [H] one as one token's. Gradients pass floor=1.0: a row whose exact
    value cancels to about zero (dq of a query that sees one key) keeps the error of the kernel's rounded o
    in rowsum(dout * o), which scales with the typical row, not with its own."""
    a, b = o.detach().double(), want.detach().double()
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)}, the reference's {tuple(b.shape)}"
    if b.dim() == 1:  # a per-head gate's gradient [H]: one token
        a, b = a[None], b[None]
    if b.dim() == 2:
        a, b = a.unsqueeze(-1), b.unsqueeze(-1)
    if b.numel() == 0:
        return
    row_norm = b.norm(dim=-1)
    floor = floor * row_norm.square().mean().sqrt()
    rel = (a - b).norm(dim=-1) / row_norm.clamp_min(floor).clamp_min(1e-30)
    bad = ~(rel < 3 * tol)  # NaN is bad
    if bad.any():
        token, head = (int(i) for i in bad.nonzero()[0])
        worst = rel.nan_to_num(float("inf")).max().item()
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.numel()} (token, head) rows have a relative error "
                             f"of {3 * tol:.3g} or more, first at token {token}, head {head} "
                             f"({rel[token, head].item():.3g}); the worst {worst:.3g}")


def check_grads(grads, want, tol, names):
    """Gradients against the float64 reference's: the whole tensor's relative error below tol, and every row
    below 3 x tol (check_rows), so one wrong row among thousands fails too. Query and key gradients take
    floor=1.0 (their rows can cancel to about zero, keeping an error of the typical row's scale); value
    gradients (names starting "dv") floor=0.1, as outputs: their rows are sums of probabilities times dout
    rows, with no such cancellation. And no row is all zeros where the reference's is above 1e-4 of the rms
    row: the floors let a row small against the rms be dropped whole (a key seen by one or two queries)."""
    for name, g, w in zip(names, grads, want):
        err = rel_err(g, w)
        assert err < tol, f"{name}: relative error {err:.3g}"
        check_rows(g, w, tol, what=name, floor=0.1 if name.startswith("dv") else 1.0)
        check_no_dropped_rows(g, w, name)


def check_no_dropped_rows(g, w, what):
    """No (token, head) row of g is all zeros where want's row norm is above 1e-4 x the rms row norm (want's
    rows that small are rounding residue of a cancelled sum, which a kernel may give as exact zeros)."""
    a, b = g.detach().double(), w.detach().double()
    if b.dim() < 3 or b.numel() == 0:  # gate gradients: rows of one element, covered by check_rows
        return
    row_norm = b.norm(dim=-1)
    live = row_norm > 1e-4 * row_norm.square().mean().sqrt()
    dropped = live & (a == 0).all(dim=-1)
    if dropped.any():
        token, head = (int(i) for i in dropped.nonzero()[0])
        raise AssertionError(f"{what}: {int(dropped.sum())} rows are all zeros where the reference's are not, "
                             f"first at token {token}, head {head} (the reference's row norm "
                             f"{row_norm[token, head].item():.3g})")


def assert_one_rounding_step(a, b, what, terms):
    """Every element of a is b or one of b's neighbours in their dtype (bf16 or fp16): two roundings of one
    fp32 sum of at most `terms` products taken in different orders; NaN anywhere fails. The two orders'
    rounding errors grow like sqrt(terms) x 2^-24 x the sum's scale (the rms of b), not like the sum itself:
    where a sum cancels to near zero they pass the dtype's own step (fp16's 11 bits sooner than bf16's 8).
    So elements whose magnitude is below floor = 16 x sqrt(terms) x 2^(mantissa bits - 24) x the rms may
    differ by the step at that floor instead: an fp32 error of about 16 x sqrt(terms) x 2^-24 x the rms (the
    largest a GPU run showed was a sixth of that: bench/NOTES.md "ulps"). Returns how many elements differ."""
    import torch

    assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype} {tuple(a.shape)} against {b.dtype} {tuple(b.shape)}"
    mantissa_bits = {torch.bfloat16: 7, torch.float16: 10}[b.dtype]
    floor = 16 * math.sqrt(terms) * 2.0 ** (mantissa_bits - 24)

    def ordered(t):  # sign and magnitude bits as one integer line: neighbours differ by 1, +0 and -0 meet
        bits = t.detach().contiguous().view(torch.int16).int()
        magnitude = bits & 0x7FFF
        return torch.where(bits < 0, -magnitude, magnitude)

    steps = (ordered(a) - ordered(b)).abs()
    x, y = a.detach().float(), b.detach().float()
    small = floor * y.square().mean().sqrt().item()
    _, exponent = torch.frexp(torch.tensor(small))  # small = m 2^exponent, 0.5 <= m < 1
    small_step = 2.0 ** (int(exponent) - 1 - mantissa_bits)
    near_zero = torch.maximum(x.abs(), y.abs()) < small
    ok = (steps <= 1) | (near_zero & ((x - y).abs() <= small_step))
    bad = ~ok | x.isnan() | y.isnan()
    if bad.any():
        at = tuple(int(i) for i in bad.nonzero()[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.numel()} elements differ by more than one step of "
                             f"{b.dtype}, first at {at}: {x[at].item():.6g} against {y[at].item():.6g}")
    return int((steps > 0).sum())


def gpu_required():
    """Whether FSA_TEST_REQUIRE_GPU is on (1, on, true, yes; unset, empty, 0, off, false, no are off; anything
    else is an error, as the C tests read it): the machine is meant to run the GPU tests, so what would skip
    them (no CUDA device for torch, no libfsa, a libfsa without an entry point they need) is a failure
    instead, not a suite of skips that passes."""
    value = os.environ.get("FSA_TEST_REQUIRE_GPU", "")
    if value.lower() in ("1", "on", "true", "yes"):
        return True
    if value.lower() in ("", "0", "off", "false", "no"):
        return False
    raise pytest.UsageError(f"FSA_TEST_REQUIRE_GPU={value}: expected 1, on, true, yes or 0, off, false, no")


def skip_or_fail(reason):
    """pytest.skip(reason) (at module level too); with FSA_TEST_REQUIRE_GPU set (gpu_required), pytest.fail."""
    if gpu_required():
        pytest.fail(f"{reason}; FSA_TEST_REQUIRE_GPU={os.environ['FSA_TEST_REQUIRE_GPU']} says the GPU tests run "
                    "here", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def cuda_torch_or_skip():
    """torch, for a GPU test module: the module skips (fails under FSA_TEST_REQUIRE_GPU) when torch is not
    installed or sees no CUDA device."""
    try:
        import torch
    except ImportError as e:
        skip_or_fail(f"torch not available: {e}")
    if not torch.cuda.is_available():
        skip_or_fail("no CUDA device")
    return torch


def load_library_or_skip(backward=False):
    """The loaded libfsa; the test skips when there is none, or (backward) when it has no backward entry points
    (fails instead under FSA_TEST_REQUIRE_GPU: skip_or_fail)."""
    from fsa_jit import _lib

    try:
        lib = _lib.get()
    except _lib.FsaLibraryNotFound as e:
        skip_or_fail(f"libfsa not available: {str(e).splitlines()[0]}")
    if backward and not lib.has_backward:
        skip_or_fail(f"{lib.path} has no backward entry points")
    return lib


def precompile_or_skip(**grid):
    """fsa_jit.precompile(**grid)'s summary; the test skips only where NVRTC is missing: precompile raises
    FsaError with FSA_STATUS_NO_NVRTC, or every shape that failed failed for that. Any other FsaError is
    raised (the test fails: a refused target, a damaged cache directory are no reason to skip)."""
    import fsa_jit
    from fsa_jit import _lib

    try:
        summary = fsa_jit.precompile(**grid)
    except fsa_jit.FsaError as e:
        if e.status != _lib.FSA_STATUS_NO_NVRTC:
            raise
        pytest.skip(f"NVRTC not available: {e}")
    if summary["failed"] and all("NO_NVRTC" in str(message) for _, message in summary["failures"]):
        pytest.skip(f"NVRTC not available: {summary['failures'][0][1]}")
    return summary
