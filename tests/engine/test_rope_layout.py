"""The load-time row permutation that lets one (normal-pairing) RoPE kernel serve neox models."""

import numpy as np
import pytest

from kernels.rope import RopeScaling, apply_rope, rope_tables
from services.modelstore.rope_layout import head_order, qkv_order


def neox_rope(x, pos, n_rot, base):
    """Neox pairing written directly: dims (i, i + n_rot/2) turn by pos * base^(-2i/n_rot)."""
    half = n_rot // 2
    ang = pos[:, None] * base ** (-np.arange(half) * 2.0 / n_rot)[None, :]        # (T, half)
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    out = x.copy()
    out[..., :half] = x[..., :half] * c - x[..., half:n_rot] * s
    out[..., half:n_rot] = x[..., :half] * s + x[..., half:n_rot] * c
    return out


@pytest.mark.parametrize("head_dim,n_rot", [(16, 16), (32, 16), (10, 6)])
def test_normal_rope_of_permuted_dims_is_neox_rope_permuted(head_dim, n_rot):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 3, head_dim))
    pos = np.array([0, 1, 7, 100, 4000])
    order = head_order(head_dim, n_rot)
    cos, sin = rope_tables(np, pos, n_rot, 10000.0, np.float64)
    np.testing.assert_allclose(apply_rope(np, x[..., order], cos, sin), neox_rope(x, pos, n_rot, 10000.0)[..., order],
                               atol=1e-12)
    # q.k is unchanged by the same permutation of both: attention scores do not move.
    assert sorted(order) == list(range(head_dim))


def test_qkv_order_moves_q_and_k_heads_only():
    order = qkv_order(n_heads=2, n_kv_heads=1, head_dim=4, n_rot=4)
    assert order.tolist() == [0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 13, 14, 15]


def test_scaling_tables_follow_their_definitions():
    pos = np.array([3, 50])
    plain_cos, _ = rope_tables(np, pos, 8, 10000.0, np.float64)
    lin_cos, _ = rope_tables(np, pos, 8, 10000.0, np.float64, RopeScaling(freq_scale=0.25))
    np.testing.assert_allclose(lin_cos, rope_tables(np, pos * 0.25, 8, 10000.0, np.float64)[0])
    ff = (1.0, 2.0, 4.0, 8.0)
    f_cos, _ = rope_tables(np, pos, 8, 10000.0, np.float64, RopeScaling(freq_factors=ff))
    want = np.cos(pos[:, None] * 10000.0 ** (-np.arange(0, 8, 2) / 8)[None, :] / np.array(ff)[None, :])
    np.testing.assert_allclose(f_cos, want)
    assert not np.allclose(plain_cos, f_cos)
