"""A Program (kernels/program.py) runs the library's ops as one call: the same bits as the calls one by
one, its Python steps in their place, and the first failing op stops it with an error naming it."""

import numpy as np
import pytest

from kernels import qmatmul as qm
from kernels.native_lib import load
from kernels.norm import add_rms_norm
from kernels.program import Program
from kernels.qmatrix import QRows
from tests.conftest import require

from .test_qmatmul import random_qmatrix

F = np.float32


@pytest.fixture
def lib():
    require(load() is not None, "the native library is not built (pip install -e . with a C compiler builds it)")
    return load()


def test_a_program_gives_the_bits_of_its_calls_one_by_one_with_python_steps_between(lib):
    rng = np.random.default_rng(0)
    w1, w2 = random_qmatrix(rng, "q4_1", 96, 64), random_qmatrix(rng, "q8_0", 64, 96)
    norm_w = rng.standard_normal(64).astype(F)
    h = rng.standard_normal((3, 64)).astype(F)
    x, y, z = np.empty((3, 64), F), np.empty((3, 96), F), np.empty((3, 64), F)
    order = []
    prog = Program(lib)
    prog.op("rms_norm", h, None, norm_w, 3, 64, 1e-5, x, where="norm")     # x = norm(h)
    prog.matmul(x, w1, y, fallback=None, where="up")                        # y = x . w1
    prog.py(lambda: (order.append(y.copy()), np.negative(y, out=y)))        # y = -y, in Python
    prog.matmul(y, w2, z, fallback=None, where="down")                      # z = y . w2
    prog.op("add", h, z, h.size, where="residual")                          # h += z
    want_h = h.copy()
    prog.finish()()
    assert (prog.calls_into_c(), prog.python_steps()) == (2, 1)          # C, Python, C
    want_x = add_rms_norm(want_h, None, norm_w, 1e-5)
    want_y = qm.qmatmul(want_x, w1)
    want_z = qm.qmatmul(-want_y, w2)
    np.testing.assert_array_equal(x, want_x)
    np.testing.assert_array_equal(order[0], want_y)                         # the Python step saw C's y
    np.testing.assert_array_equal(z, want_z)
    np.testing.assert_array_equal(h, want_h + want_z)


def test_a_matrix_of_parts_fills_each_part_s_columns(lib):
    rng = np.random.default_rng(1)
    parts = QRows((random_qmatrix(rng, "q4_0", 40, 64), random_qmatrix(rng, "q8_0", 24, 64)))
    x, out = rng.standard_normal((5, 64)).astype(F), np.full((5, 64), np.nan, F)
    prog = Program(lib)
    prog.matmul(x, parts, out, fallback=None)
    prog.finish()()
    np.testing.assert_array_equal(out, qm.qmatmul(x, parts))


def test_a_dense_matrix_takes_the_python_fallback(lib):
    calls = []
    prog = Program(lib)
    x, out = np.ones((1, 4), F), np.empty((1, 4), F)
    prog.matmul(x, np.eye(4, dtype=F), out, fallback=lambda: calls.append("blas"))
    prog.finish()()
    assert calls == ["blas"]


def test_the_first_failing_op_stops_the_program_and_is_named(lib):
    rng = np.random.default_rng(2)
    q = rng.standard_normal((1, 4, 8)).astype(F)
    cache = np.zeros((2, 4, 3, 8), F)                        # 3 KV heads: 4 query heads do not share them
    table, lens, out = np.zeros((1, 1), np.int32), np.ones(1, np.int32), np.zeros((1, 4, 8), F)
    h, after = np.ones(4, F), []
    prog = Program(lib)
    prog.op("add", h, h, 4, where="layer 3 before")
    prog.op("attend", q, cache, cache, table, lens, 1, 4, 3, 8, 4, 1, 2, 0, 0.125, out, where="layer 3")
    prog.op("add", h, h, 4, where="layer 3 after")
    prog.py(lambda: after.append(1))
    with pytest.raises(ValueError, match="attend of layer 3 refused its arguments"):
        prog.finish()()
    np.testing.assert_array_equal(h, np.full(4, 2, F))      # the op before ran, the one after did not
    assert after == []


def test_an_unknown_op_or_too_many_arguments_is_refused_when_added(lib):
    prog = Program(lib)
    with pytest.raises(ValueError, match="unknown op"):
        prog.op("softmax", 1, 2)
    with pytest.raises(ValueError, match="at most 15"):
        prog.op("add", *range(16))


def test_timed_ops_give_the_same_bits_and_each_op_its_own_time(lib):
    rng = np.random.default_rng(3)
    w = random_qmatrix(rng, "q4_1", 96, 64)
    norm_w = rng.standard_normal(64).astype(F)
    start = rng.standard_normal((3, 64)).astype(F)
    runs = []
    for timed in (False, True):
        h, x, y = start.copy(), np.empty((3, 64), F), np.empty((3, 96), F)
        prog = Program(lib)
        prog.op("rms_norm", h, None, norm_w, 3, 64, 1e-5, x)
        prog.py(lambda: None)
        prog.matmul(x, w, y, fallback=None)
        prog.op("add", h, x, h.size)
        prog.finish()
        ns = prog.time_ops() if timed else None
        prog()
        runs.append((h.copy(), x.copy(), y.copy()))
        if timed:
            first = ns.copy()
            assert first.shape == (3,) and (first > 0).all()     # one time an op, the Python step apart
            prog()
            assert (ns > first).all()                            # each run adds its times
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def test_a_timed_program_stops_at_the_failing_op_as_well(lib):
    prog = Program(lib)
    h = np.ones(4, F)
    prog.op("add", h, h, 4, where="before")
    prog.op("attend", h, h, h, h, h, 1, 4, 3, 8, 4, 1, 2, 0, 0.125, h, where="layer 0")
    prog.finish().time_ops()
    with pytest.raises(ValueError, match="attend of layer 0 refused its arguments"):
        prog()
