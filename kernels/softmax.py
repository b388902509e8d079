"""Numerically stable softmax along the last axis, keeping the input dtype."""

from __future__ import annotations


def softmax(xp, x):
    """exp(x - max) / sum over the last axis; -inf entries give exact zeros."""
    m = xp.max(x, axis=-1, keepdims=True)
    e = xp.exp(x - m)
    e /= xp.sum(e, axis=-1, keepdims=True)
    return e
