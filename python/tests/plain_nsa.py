"""A plain PyTorch NSA layer, written from the definitions with dense masks, for the tests.

Per sequence and KV head, every branch is masked attention over a dense
[L, N] mask:
- compressed: compressed token j (covering positions j*d .. j*d + l - 1) is
  visible to position i when j*d + l - 1 <= i;
- block scores: for block c (positions c*BK .. c*BK + BK - 1), the sum over
  the group's query heads and the visible compressed tokens overlapping it of
  the compressed attention probabilities; top-k over blocks 0 .. i // BK with
  the first `init` blocks and the `local` blocks ending at the own block
  forced (the lower first), then by score, equal scores to the lower block;
  the taken blocks ascending, -1 after them;
- selected: key j visible when its block is selected and j <= i;
- window: key j visible when i - W < j <= i (W one window, or one per query head);
then o = g_cmp * o_cmp + g_sel * o_sel + g_win * o_win.
Computes in the inputs' dtype (use float64). Slow and obviously right.
"""

import math

import torch


def attend(q, k, v, mask, scale):
    """Masked softmax attention. q [G, L, Dk], k [N, Dk], v [N, Dv], mask [L, N] bool.
    Returns o [G, L, Dv] (0 for a row without a visible key), p [G, L, N] and lse [G, L] (-inf for such a
    row); no NaN gradients."""
    if k.shape[0] == 0:  # nothing to attend to (a sequence shorter than the compression kernel)
        g, length = q.shape[0], q.shape[1]
        return (q.new_zeros(g, length, v.shape[1]), q.new_zeros(g, length, 0),
                q.new_full((g, length), -math.inf))
    seen = mask.any(dim=1)
    scores = scale * (q @ k.t())
    shift = scores.detach().masked_fill(~mask, -math.inf).amax(dim=-1, keepdim=True)
    shift = torch.where(seen[None, :, None], shift, torch.zeros_like(shift))
    e = torch.exp((scores - shift).masked_fill(~mask, -math.inf))
    total = e.sum(dim=-1, keepdim=True)
    safe_total = torch.where(seen[None, :, None], total, torch.ones_like(total))
    p = e / safe_total
    lse = torch.where(seen[None, :], (shift + torch.log(safe_total)).squeeze(-1), -math.inf)
    return p @ v, p, lse.detach()


def cmp_visibility(length, count, kernel_size, stride, device):
    """[L, count] bool: compressed token j visible to position i."""
    i = torch.arange(length, device=device)[:, None]
    j = torch.arange(count, device=device)[None, :]
    return j * stride + kernel_size - 1 <= i


def block_overlap(count, n_blocks, kernel_size, stride, block_size, device):
    """[count, n_blocks] float: compressed token j overlaps block c."""
    j = torch.arange(count, device=device)[:, None]
    c = torch.arange(n_blocks, device=device)[None, :]
    return ((j * stride <= c * block_size + block_size - 1) & (j * stride + kernel_size - 1 >= c * block_size)).double()


def select(scores, top_k, block_size, init_blocks, local_blocks):
    """scores [L, n_blocks] (position i uses blocks 0 .. i // BK) -> topk [L, top_k] int32."""
    length, n_blocks = scores.shape
    own = (torch.arange(length, device=scores.device) // block_size)[:, None]
    c = torch.arange(n_blocks, device=scores.device)[None, :]
    forced = ((c < init_blocks) | (c > own - local_blocks)) & (c <= own)
    # Forced blocks rank above every score (scores are at most G <= 16), the lower first; blocks past the
    # own one below everything. A stable descending sort gives equal keys to the lower block.
    key = torch.where(forced, 1e6 - c.double(), scores.double())
    key = torch.where(c <= own, key, torch.full_like(key, -math.inf))
    order = torch.sort(key, dim=1, descending=True, stable=True).indices
    taken = torch.clamp(own + 1, max=top_k)  # [L, 1]
    slot = torch.arange(min(top_k, n_blocks), device=scores.device)[None, :]
    chosen = torch.where(slot < taken, order[:, : slot.shape[1]], torch.full_like(order[:, : slot.shape[1]], n_blocks))
    chosen = torch.sort(chosen, dim=1).values
    out = torch.full((length, top_k), -1, dtype=torch.int32, device=scores.device)
    out[:, : chosen.shape[1]] = torch.where(chosen < n_blocks, chosen, -1).int()
    return out


def nsa_layer(q, k, v, k_cmp, v_cmp, g_cmp, g_sel, g_win, cu_seqlens, cu_seqlens_c, kernel_size, stride, block_size,
              top_k, window, init_blocks=1, local_blocks=2, scale=None, topk=None, k_win=None, v_win=None):
    """The layer. Returns a dict: o [T, Hq, Dv]; o_cmp, o_sel, o_win (the branches); lse_cmp, lse_win [Hq, T];
    topk [T, Hkv, K] int32, the layer's own selection; scores: {(sequence start, KV head): [L, n_blocks]}. `topk` given: the selected branch uses it instead of its own selection (the tests feed it
    the kernel's selection once it is shown consistent, so that a near tie cannot fail an output check)."""
    t_len, hq, dk = q.shape
    hkv, dv = v.shape[1], v.shape[2]
    group = hq // hkv
    scale = 1.0 / math.sqrt(dk) if scale is None else scale
    k_win = k if k_win is None else k_win
    v_win = v if v_win is None else v_win
    cu = [int(x) for x in cu_seqlens.tolist()]
    cu_c = [int(x) for x in cu_seqlens_c.tolist()]
    parts = {"cmp": [], "sel": [], "win": []}  # per branch: (start, KV head, o [G, L, Dv])
    lses = {"cmp": torch.full((hq, t_len), -math.inf, dtype=q.dtype, device=q.device)}
    lses["win"] = lses["cmp"].clone()
    own_topk = torch.full((t_len, hkv, top_k), -1, dtype=torch.int32, device=q.device)
    all_scores = {}
    for b in range(len(cu) - 1):
        s, e, cs, ce = cu[b], cu[b + 1], cu_c[b], cu_c[b + 1]
        length, count = e - s, ce - cs
        if length == 0:
            continue
        pos = torch.arange(length, device=q.device)
        n_blocks = (length + block_size - 1) // block_size
        causal = pos[None, :] <= pos[:, None]
        cmp_mask = cmp_visibility(length, count, kernel_size, stride, q.device)
        windows = list(window) if isinstance(window, (list, tuple)) else [window] * hq  # per query head
        for h in range(hkv):
            qh = q[s:e, h * group:(h + 1) * group].transpose(0, 1)  # [G, L, Dk]
            heads = slice(h * group, (h + 1) * group)
            o_c, p, lses["cmp"][heads, s:e] = attend(qh, k_cmp[cs:ce, h], v_cmp[cs:ce, h], cmp_mask, scale)
            scores = p.detach().sum(dim=0) @ block_overlap(count, n_blocks, kernel_size, stride, block_size, q.device)
            all_scores[(s, h)] = scores
            rows = select(scores, top_k, block_size, init_blocks, local_blocks)
            own_topk[s:e, h] = rows
            use = rows if topk is None else topk[s:e, h]
            picked = torch.zeros(length, n_blocks + 1, dtype=torch.bool, device=q.device)
            picked.scatter_(1, torch.where(use >= 0, use.long(), n_blocks), True)
            sel_mask = picked[:, pos // block_size] & causal
            o_s, _, _ = attend(qh, k[s:e, h], v[s:e, h], sel_mask, scale)
            o_w = []
            for r in range(group):  # each query head its own window
                w = windows[h * group + r]
                win_mask = causal & (pos[None, :] > pos[:, None] - w)
                o_r, _, lses["win"][h * group + r, s:e] = attend(qh[r:r + 1], k_win[s:e, h], v_win[s:e, h],
                                                                win_mask, scale)
                o_w.append(o_r)
            o_w = torch.cat(o_w, dim=0)
            for name, o in (("cmp", o_c), ("sel", o_s), ("win", o_w)):
                parts[name].append((s, h, o))
    outs = {name: _assemble(pieces, t_len, hq, hkv, dv, q) for name, pieces in parts.items()}
    gate = [g if not isinstance(g, torch.Tensor) or g.dim() > 2 else g.unsqueeze(-1) for g in (g_cmp, g_sel, g_win)]
    o = gate[0] * outs["cmp"] + gate[1] * outs["sel"] + gate[2] * outs["win"]
    return dict(o=o, o_cmp=outs["cmp"], o_sel=outs["sel"], o_win=outs["win"], lse_cmp=lses["cmp"],
                lse_win=lses["win"], topk=own_topk, scores=all_scores)


def _assemble(pieces, t_len, hq, hkv, dv, like):
    """[T, Hq, Dv] from (start token, KV head, o [G, L, Dv]) pieces, by concatenation (no in-place writes
    into tensors autograd tracks); empty sequences have no pieces and no rows."""
    by_start = {}
    for s, h, o in pieces:
        by_start.setdefault(s, [None] * hkv)[h] = o
    if not by_start:
        return like.new_zeros(t_len, hq, dv)
    return torch.cat([torch.cat(by_start[s], dim=0).transpose(0, 1) for s in sorted(by_start)], dim=0)
