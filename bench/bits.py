"""Bit-for-bit comparison of tensors, for the scripts that check that two runs, settings or builds give the same
bits (torch.equal compares values: +0 == -0 and NaN != NaN)."""

import torch

_INTS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def same_bits(a, b):
    """Whether a and b hold the same bits; another shape or dtype is not the same."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    bits = _INTS[a.element_size()]
    return torch.equal(a.detach().view(bits), b.detach().view(bits))
