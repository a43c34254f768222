"""Plain PyTorch selected attention: the semantics of docs/semantics.md, for tests.

Slow (a dense [G, L, L] score matrix per sequence and KV head) and meant to
be obviously right. Differentiable with respect to q, k and v, without NaN
gradients for rows that see no key. Works on any device; copies cu_seqlens
to the host.
"""

import math

import torch

from .attention import _topk_layout


def selected_attention_reference(q, k, v, topk_idx, cu_seqlens, block_size, scale=None,
                                 return_lse=False, topk_layout=None):
    """The arguments (those that change the result) and conventions of fsa_jit.selected_attention (v may have
    its own head dim Dv; o is [T, Hq, Dv]).

    block_size may be any positive int here (tiny problems for gradcheck).
    Computes in float64 for float64 inputs, else float32; o is returned in
    q's dtype, lse [Hq, T] in the working precision.
    """
    t_len, hq, d = q.shape
    hkv = k.shape[1]
    if hq % hkv != 0:
        raise ValueError(f"Hq={hq} is not a multiple of Hkv={hkv}")
    group = hq // hkv
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    if _topk_layout(topk_idx, hkv, t_len, topk_layout) == "thk":
        topk_idx = topk_idx.transpose(0, 1)  # -> [Hkv, T, K]
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    qw, kw, vw = q.to(work), k.to(work), v.to(work)
    bounds = [int(x) for x in cu_seqlens.tolist()]
    if bounds[0] != 0 or bounds[-1] != t_len or any(a > b for a, b in zip(bounds, bounds[1:])):
        raise ValueError(f"cu_seqlens must rise from 0 to T={t_len}, got {bounds}")

    o_parts, lse_parts = [], []
    for b in range(len(bounds) - 1):
        start, end = bounds[b], bounds[b + 1]
        length = end - start
        if length == 0:
            continue
        pos = torch.arange(length, device=q.device)
        own_block = pos // block_size
        n_blocks = (length + block_size - 1) // block_size
        o_heads, lse_heads = [], []
        for h in range(hkv):
            rows = topk_idx[h, start:end].long()  # [L, K]
            valid = (rows >= 0) & (rows <= own_block[:, None])
            # sel[i, c]: query i selected block c; a repeated block lands on
            # the same cell, so it counts once. Column n_blocks takes the
            # invalid slots and is dropped.
            sel = torch.zeros(length, n_blocks + 1, dtype=torch.bool, device=q.device)
            sel.scatter_(1, torch.where(valid, rows, n_blocks), True)
            mask = sel[:, own_block] & (pos[None, :] <= pos[:, None])  # [L queries, L keys]

            qh = qw[start:end, h * group:(h + 1) * group].transpose(0, 1)  # [G, L, D]
            kh = kw[start:end, h]  # [L, D]
            vh = vw[start:end, h]
            scores = scale * (qh @ kh.t())  # [G, L, L]
            seen = mask.any(dim=1)  # [L]
            # The shift only keeps exp in range; softmax and lse do not depend
            # on it, so it carries no gradient.
            shift = scores.detach().masked_fill(~mask, -math.inf).amax(dim=-1, keepdim=True)
            shift = torch.where(seen[None, :, None], shift, torch.zeros_like(shift))
            e = torch.exp((scores - shift).masked_fill(~mask, -math.inf))
            total = e.sum(dim=-1)  # [G, L]; 0 where nothing is seen
            safe_total = torch.where(seen[None, :], total, torch.ones_like(total))
            o_heads.append((e / safe_total[..., None]) @ vh)  # [G, L, D]; 0 where nothing is seen
            lse = shift.squeeze(-1) + torch.log(safe_total)
            lse_heads.append(torch.where(seen[None, :], lse, torch.full_like(lse, -math.inf)))
        o_parts.append(torch.cat(o_heads, dim=0).transpose(0, 1))  # [L, Hq, D]
        lse_parts.append(torch.cat(lse_heads, dim=0))  # [Hq, L]

    if o_parts:
        o = torch.cat(o_parts, dim=0)
        lse = torch.cat(lse_parts, dim=1)
    else:  # T == 0
        o = vw.new_zeros((0, hq, v.shape[2]))
        lse = qw.new_zeros((hq, 0))
    o = o.to(q.dtype)
    return (o, lse) if return_lse else o
