"""Causal attention with GQA over packed variable-length sequences.

What it computes
    For each query token i of a sequence, over exactly its visible keys j <= pos(i):
    ``o_i = sum_j p_ij v_j / sum_j p_ij``,  ``p_ij = exp(s_ij - max_j s_ij)``,
    ``s_ij = scale * sum_d q_id k_jd``. Query head h reads KV head h // (Hq / Hkv).

Contract
    fp32 throughout, inputs as given (bf16 K/V are what a paged KV cache stores). The dot
    products over D and the two sums over keys are ``tree_sum`` (groups=1); the max is exact;
    ``exp`` is the primitives' exp; masked keys contribute exact zeros. Because ``tree_sum``
    is prefix-invariant, a token's output depends only on its query, its own visible keys and
    values and ``scale`` -- not on the sequence length it sits in, the other sequences, how the
    queries are chunked, or whether the keys come from the same pass (training, prefill) or a
    cache (chunked prefill, decode): all of them call ``attend``. One rounding, at the output.

Backward (deterministic; fp32; per sequence, queries in fixed chunks accumulated in order)
    P recomputed from the saved row max and row sum; dV = P^T dO, dP = dO V^T,
    dS = P (dP - rowsum(dO o)), dQ = scale dS K, dK = scale dS^T Q; GQA heads of a group and the
    query chunks are reduced by ``tree_sum`` and then in chunk order.

Limits
    Materialises [heads, queries, keys, D] products in chunks of ``CHUNK_ELEMS`` elements:
    the specification, not a flash kernel.
"""

from __future__ import annotations

import torch

from ..checks import check_attention, check_paged_attention
from .primitives import CHUNK_ELEMS, exp, tree_sum


def _query_chunk(n_rows: int, n_keys: int, head_dim: int) -> int:
    return max(1, CHUNK_ELEMS // max(1, n_rows * n_keys * head_dim))


def _scores(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """q [..., Hkv, R, n, D], k [..., Hkv, L, D] (fp32) -> scale * q.k  [..., Hkv, R, n, L]."""
    return tree_sum(q[..., :, None, :] * k[..., None, None, :, :]) * scale


def _visible(q_pos: torch.Tensor, n_keys: int) -> torch.Tensor:
    return torch.arange(n_keys, device=q_pos.device) <= q_pos[..., None]  # [..., n, L]


def _forward_rows(q, k, v, q_pos, scale):
    """Batched over B: q [B, n, Hq, D], k/v [B, L, Hkv, D], q_pos [B, n] ->
    (o [B, n, Hq, D] fp32, rowmax, rowsum [B, Hq, n]). Rows never mix."""
    b, n, hq, d = q.shape
    L, hkv = k.shape[1], k.shape[2]
    r = hq // hkv
    qh = q.to(torch.float32).permute(0, 2, 1, 3).reshape(b, hkv, r, n, d)
    kh = k.to(torch.float32).permute(0, 2, 1, 3)          # [B, Hkv, L, D]
    vt = v.to(torch.float32).permute(0, 2, 3, 1)          # [B, Hkv, D, L]
    s = _scores(qh, kh, scale)
    s = torch.where(_visible(q_pos, L)[:, None, None], s, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    p = exp(s - m)
    den = tree_sum(p)                                     # [B, Hkv, R, n]
    num = tree_sum(p[..., None, :] * vt[:, :, None, None])  # [B, Hkv, R, n, D]
    o = num / den[..., None]
    return (o.reshape(b, hq, n, d).permute(0, 2, 1, 3), m.reshape(b, hq, n), den.reshape(b, hq, n))


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor,
           scale: float) -> torch.Tensor:
    """Queries against keys of their own sequence: q [n, Hq, D]; k, v [L, Hkv, D]; query i
    sees keys 0..q_pos[i]. Batched form: a leading dim B on all four (sequences padded to
    common n and L; keys past a query's position must be finite, e.g. zeros). Returns q's
    shape and dtype. The building block of every attention path."""
    batched = q.dim() == 4
    if not batched:
        q, k, v, q_pos = q[None], k[None], v[None], q_pos[None]
    out = torch.empty_like(q)
    step = _query_chunk(q.shape[0] * q.shape[2], k.shape[1], q.shape[3])
    for i in range(0, q.shape[1], step):
        sl = slice(i, i + step)
        out[:, sl] = _forward_rows(q[:, sl], k, v, q_pos[:, sl], scale)[0].to(q.dtype)
    return out if batched else out[0]


def _context(kv_cache: torch.Tensor, block_table_rows: torch.Tensor, seq_lens: torch.Tensor):
    """K/V of each request's context from the paged cache view [blocks, Hkv, block_size, 2D]:
    [R, L_max, Hkv, D] each; positions past a request's own length are zeroed (masked anyway;
    zeros keep stale cache bits out of the sums)."""
    d, bs, hkv = kv_cache.shape[3] // 2, kv_cache.shape[2], kv_cache.shape[1]
    l_max = int(seq_lens.max())
    nblk = -(-l_max // bs)
    ctx = kv_cache[block_table_rows[:, :nblk].long()]            # [R, nblk, Hkv, bs, 2D]
    ctx = ctx.permute(0, 1, 3, 2, 4).reshape(ctx.shape[0], nblk * bs, hkv, 2 * d)[:, :l_max]
    valid = torch.arange(l_max, device=ctx.device) < seq_lens[:, None].to(ctx.device)
    ctx = torch.where(valid[..., None, None], ctx, torch.zeros((), dtype=ctx.dtype, device=ctx.device))
    return ctx[..., :d], ctx[..., d:]


def paged_attention(q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor, seq_lens: torch.Tensor,
                    query_start_loc: torch.Tensor, scale: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of one step's scheduled tokens against a paged KV cache (vLLM's layout, see
    ``rlk_models.ops.paged``): request r owns q rows query_start_loc[r]:query_start_loc[r+1],
    the last tokens of its seq_lens[r]-token context. All single-token (decode) requests go in
    one batched ``attend``; each prefill chunk in one more. Returns [T, Hq, D]."""
    check_paged_attention(q, kv_cache)
    out = torch.empty_like(q) if out is None else out
    qsl, lens = query_start_loc.tolist(), seq_lens.tolist()
    decode = [r for r in range(len(lens)) if qsl[r + 1] - qsl[r] == 1]
    if decode:
        rows = torch.tensor([qsl[r] for r in decode], device=q.device)
        dl = torch.tensor([lens[r] for r in decode], device=q.device)
        k, v = _context(kv_cache, block_table[decode], dl)
        out[rows] = attend(q[rows][:, None], k, v, (dl - 1)[:, None], scale)[:, 0]
    for r, seq_len in enumerate(lens):
        q0, q1 = qsl[r], qsl[r + 1]
        if q1 - q0 < 2:
            continue
        k, v = _context(kv_cache, block_table[r:r + 1], torch.tensor([seq_len]))
        q_pos = torch.arange(seq_len - (q1 - q0), seq_len, device=q.device)
        out[q0:q1] = attend(q[q0:q1], k[0], v[0], q_pos, scale)
    return out


def _backward_seq(q, k, v, o, m, den, do, scale):
    """One sequence (positions 0..L-1): returns fp32 dq [L, Hq, D], dk, dv [L, Hkv, D]."""
    L, hq, d = q.shape
    hkv = k.shape[1]
    r = hq // hkv
    kh = k.to(torch.float32).permute(1, 0, 2)
    vh = v.to(torch.float32).permute(1, 0, 2)
    dq = torch.empty(L, hq, d, dtype=torch.float32, device=q.device)
    dk = torch.zeros(hkv, L, d, dtype=torch.float32, device=q.device)
    dv = torch.zeros_like(dk)
    step = _query_chunk(hq, L, d)
    pos = torch.arange(L, device=q.device)
    for i in range(0, L, step):
        sl = slice(i, i + step)
        n = q[sl].shape[0]
        qh = q[sl].to(torch.float32).permute(1, 0, 2).reshape(hkv, r, n, d)
        doh = do[sl].to(torch.float32).permute(1, 0, 2).reshape(hkv, r, n, d)
        oh = o[sl].to(torch.float32).permute(1, 0, 2).reshape(hkv, r, n, d)
        s = torch.where(_visible(pos[sl], L), _scores(qh, kh, scale), float("-inf"))
        p = exp(s - m[:, sl].reshape(hkv, r, n, 1)) / den[:, sl].reshape(hkv, r, n, 1)
        dp = tree_sum(doh[:, :, :, None, :] * vh[:, None, None, :, :])       # [Hkv, R, n, L]
        delta = tree_sum(doh * oh)[..., None]                                # [Hkv, R, n, 1]
        ds = p * (dp - delta)
        dq_c = tree_sum(ds[:, :, :, None, :] * kh.transpose(1, 2)[:, None, None]) * scale
        dq[sl] = dq_c.reshape(hq, n, d).permute(1, 0, 2)
        # dK, dV: reduce over (group head, query) of this chunk, then add chunks in order
        pt = p.permute(0, 3, 1, 2).reshape(hkv, L, 1, r * n)                 # [Hkv, L, 1, R*n]
        dst = ds.permute(0, 3, 1, 2).reshape(hkv, L, 1, r * n)
        dov = doh.permute(0, 3, 1, 2).reshape(hkv, 1, d, r * n)
        qv = qh.permute(0, 3, 1, 2).reshape(hkv, 1, d, r * n)
        dv = dv + tree_sum(pt * dov)
        dk = dk + tree_sum(dst * qv) * scale
    return dq, dk.permute(1, 0, 2), dv.permute(1, 0, 2)


class _VarlenAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens, scale):
        out = torch.empty_like(q)
        ms, dens = [], []
        bounds = cu_seqlens.tolist()
        for a, b in zip(bounds[:-1], bounds[1:]):
            if b == a:
                continue
            pos = torch.arange(b - a, device=q.device)
            step = _query_chunk(q.shape[1], b - a, q.shape[2])
            for i in range(a, b, step):
                e = min(i + step, b)
                o, m, den = _forward_rows(q[None, i:e], k[None, a:b], v[None, a:b], pos[None, i - a:e - a], scale)
                out[i:e] = o[0].to(q.dtype)
                ms.append(m[0])
                dens.append(den[0])
        m = torch.cat(ms, dim=1) if ms else q.new_zeros(q.shape[1], 0, dtype=torch.float32)
        den = torch.cat(dens, dim=1) if dens else m
        ctx.save_for_backward(q, k, v, out, m, den, cu_seqlens)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, m, den, cu = ctx.saved_tensors
        dq = torch.zeros_like(q, dtype=torch.float32)
        dk = torch.zeros_like(k, dtype=torch.float32)
        dv = torch.zeros_like(v, dtype=torch.float32)
        bounds = cu.tolist()
        for a, b in zip(bounds[:-1], bounds[1:]):
            if b == a:
                continue
            dq[a:b], dk[a:b], dv[a:b] = _backward_seq(
                q[a:b], k[a:b], v[a:b], o[a:b], m[:, a:b], den[:, a:b], do[a:b], ctx.scale)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                     scale: float) -> torch.Tensor:
    """Causal self-attention of packed sequences: q [T, Hq, D], k/v [T, Hkv, D], sequence s
    spans tokens cu_seqlens[s]:cu_seqlens[s+1]. Returns [T, Hq, D] in q's dtype."""
    check_attention(q, k, v, cu_seqlens)
    return _VarlenAttention.apply(q, k, v, cu_seqlens, scale)
