"""Batch invariance of a quantized matmul: a row's outputs have the same bits alone, in any batch,
and at any place in it (the kernels sum each (row, output) in one order whatever tile it falls in)."""

import numpy as np

from kernels import qmatmul as qm


def assert_batch_invariant(x: np.ndarray, w, rows: tuple[int, ...]) -> None:
    full = qm.qmatmul(x, w)
    for t in rows:
        for lo in (0, t // 2, t):
            np.testing.assert_array_equal(qm.qmatmul(x[lo:t + 1], w)[t - lo], full[t])
