"""Top-k, top-p and min-p as one keep-mask over the vocabulary, vectorized over the batch.

Every filter is a function of the row's values alone (never of the batch it sits in), so the
same request keeps the same candidates whatever shares its batch:
- top-k keeps exactly k tokens: the k largest logits, ties at the k-th value broken by lowest id;
- top-p keeps every token whose strictly-more-likely tokens (among the top-k survivors, after
  temperature) hold less than p of their mass: the smallest set with mass >= p, plus any tokens
  tied with its least likely member;
- min-p keeps tokens whose tempered probability is at least min_p times the largest one.
"""

import numpy as np

from kernels._sampling_xp import to_host as _host

# Top-p without top-k first looks at this many best tokens; a row whose nucleus is wider (a flat
# distribution) is redone with a window WIDEN times larger, up to a full sort. The result is
# the same whatever the window: only the sorted prefix it contains is ever read.
TOP_P_CANDIDATES = 256
WIDEN = 16


def keep_mask(z, w, total, zmax, temp, top_k, top_p, min_p, xp=np):
    """Boolean (B, V): which tokens row b may sample.

    z: penalized logits (B, V) float32; w = exp((z - zmax) / temp) (B, V) float32, so the best
    token has weight 1; total = w.sum(1). top_k (B,) int64 with 0 = off; top_p, min_p (B,) float32.
    """
    B, V = z.shape
    keep = w >= min_p[:, None]
    k = xp.minimum(top_k, V)
    sel = _select(_host((k > 0) | (top_p < 1)), xp)
    if sel is not None:
        zr = z[sel]
        thr_k, thr_p = _thresholds(zr, zmax[sel], temp[sel], total[sel], k[sel], top_p[sel], xp)
        keep_r = keep[sel] & (zr >= xp.maximum(thr_k, thr_p)[:, None])
        keep[sel] = _exactly_k(keep_r, zr, thr_k, k[sel], xp)
    return keep


def _thresholds(z, zmax, temp, total, k, top_p, xp):
    """Per row, the smallest logit kept by top-k and by top-p (-inf where a filter is off)."""
    B, V = z.shape
    C = int(min(V, max(int(kk) if kk > 0 else TOP_P_CANDIDATES for kk in _host(k))))
    zs = _top_sorted(z, C, xp)  # (B, C) the C largest logits of each row, descending
    idx = xp.maximum(k, 1) - 1
    thr_k = xp.where(k > 0, zs[xp.arange(B), idx], xp.float32(-np.inf))
    thr_p, n = _nucleus(zs, zmax, temp, total, k, top_p, xp)
    # Only without top-k can the nucleus reach past the window: widen it for those rows.
    while C < V:
        sel = _select(_host((k == 0) & (top_p < 1) & (n == C)), xp)
        if sel is None:
            break
        C = min(V, C * WIDEN)
        thr_p[sel], n[sel] = _nucleus(_top_sorted(z[sel], C, xp), zmax[sel], temp[sel],
                                      total[sel], k[sel], top_p[sel], xp)
    return thr_k, thr_p


def _select(mask, xp):
    """An index for the rows where mask holds: a plain slice when that is all of them (no
    copies for the common homogeneous batch), None when none."""
    if mask.all():
        return slice(None)
    return xp.asarray(np.flatnonzero(mask)) if mask.any() else None


def _nucleus(zs, zmax, temp, total, k, top_p, xp):
    """Top-p threshold from each row's best logits zs (B, C) sorted descending, and its size."""
    B, C = zs.shape
    ws = xp.exp((zs - zmax[:, None]) / temp[:, None])  # the same op as w, so the same weights
    cs = xp.cumsum(ws, axis=1)
    excl = xp.concatenate([xp.zeros((B, 1), dtype=np.float32), cs[:, :-1]], axis=1)
    # top-p renormalizes over the top-k survivors (HF and vLLM order: top-k, then top-p).
    denom = xp.where(k > 0, cs[xp.arange(B), xp.maximum(k, 1) - 1], total)
    in_k = xp.arange(C)[None, :] < xp.where(k > 0, k, C)[:, None]
    n = ((excl < top_p[:, None] * denom[:, None]) & in_k).sum(axis=1)  # >= 1: excl[:, 0] = 0
    return xp.where(top_p < 1, zs[xp.arange(B), n - 1], xp.float32(-np.inf)), n


def _exactly_k(keep, z, thr_k, k, xp):
    """Drop tokens tied at the k-th logit beyond k, keeping the lowest ids."""
    eq = z == thr_k[:, None]
    need = k - (z > thr_k[:, None]).sum(axis=1)
    over = (k > 0) & (eq.sum(axis=1) > need)
    if not bool(over.any()):
        return keep
    rank = xp.cumsum(eq, axis=1)  # 1-based rank of each tied token, in id order
    drop = eq & (rank > need[:, None]) & over[:, None]
    return keep & ~drop


def _top_sorted(z, C, xp):
    V = z.shape[1]
    part = z if C == V else -xp.partition(-z, C - 1, axis=1)[:, :C]
    return -xp.sort(-part, axis=1)
