"""kvcache_attention rejects bad arguments before any device or library call.

Runs on a CPU-only machine: every check except the device check comes before
it, so CPU tensors reach each of them."""

import pytest

torch = pytest.importorskip("torch")

from fsa_jit import _lib, kvcache  # noqa: E402


@pytest.fixture(autouse=True)
def no_library(monkeypatch):
    """Any use of libfsa fails the test."""

    def reached(*args, **kwargs):
        raise AssertionError("validation let a bad call through to libfsa")

    monkeypatch.setattr(_lib, "get", reached)


def problem(D=64, Dv=None, Hq=4, Hkv=2, page=16, pages=6, tq=3, k=4):
    """Two sequences (1 and 2 new tokens) over a small paged cache, on the CPU."""
    return dict(
        q=torch.randn(tq, Hq, D).to(torch.bfloat16),
        k_cache=torch.randn(pages, page, Hkv, D).to(torch.bfloat16),
        v_cache=torch.randn(pages, page, Hkv, Dv or D).to(torch.bfloat16),
        cu_seqlens_q=torch.tensor([0, 1, tq], dtype=torch.int32),
        seqused_k=torch.tensor([20, 30], dtype=torch.int32),
        block_table=torch.zeros(2, 3, dtype=torch.int32),
        topk_idx=torch.zeros(tq, Hkv, k, dtype=torch.int32),
        block_size=16,
    )


def expect(match, **call):
    with pytest.raises(ValueError, match=match):
        kvcache.kvcache_attention(**call)


def test_a_valid_cpu_call_fails_only_on_the_device():
    expect(r"q must be a CUDA tensor", **problem())


@pytest.mark.parametrize("dims", [(192, 128), (128, 64), (64, 128), (128, 256)])
def test_a_value_cache_of_its_own_head_dim_fails_only_on_the_device(dims):
    expect(r"q must be a CUDA tensor", **problem(D=dims[0], Dv=dims[1]))


def test_q_and_the_key_cache_must_share_the_head_dim():
    p = problem(D=64)
    p["k_cache"] = torch.randn(6, 16, 2, 128).to(torch.bfloat16)
    expect(r"q and k_cache share the query/key head dim: q has 64, k_cache 128", **p)


def test_the_caches_must_have_the_same_pages_and_heads():
    p = problem(Dv=128)
    p["v_cache"] = torch.randn(6, 16, 1, 128).to(torch.bfloat16)
    expect(r"the same pages and heads", **p)


@pytest.mark.parametrize("Dv", [8, 24, 272])
def test_a_value_head_dim_outside_16_to_256_in_steps_of_16_is_refused(Dv):
    expect(rf"v_cache's head dim {Dv}", **problem(Dv=Dv))


def test_clear_plans_of_the_package_drops_the_paged_cache_plans_too(monkeypatch):
    import fsa_jit

    monkeypatch.setattr(_lib, "_library", None)  # nothing to destroy in a library: only the entries go
    monkeypatch.setitem(kvcache._plans, ("a paged-cache plan key",), (0x1234, 0))
    fsa_jit.clear_plans()
    assert kvcache._plans == {}
