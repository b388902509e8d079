"""The references of the device's quantized kernels against the CPU's own reading of GGUF blocks:
ref_quant reads each unit of 32 weights at the bytes quant.cuh reads (so this checks the CUDA
code's indexing too), and must give the CPU's dequantization (kernels.qmatrix, the gguf package)
bit for bit, on valid blocks and on any bytes; its product must be the CPU kernel's
(kernels.qmatmul, native where built) on activations already rounded as that kernel rounds them."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.gpu import ref_quant
from kernels.gpu.ref_quant import BadDeviceMatrix, dequant_rows, row_bytes
from kernels.qact import round_act_for
from kernels.qmatmul import qmatmul
from kernels.qmatrix import QMatrix

from .cases import KINDS, weight

BLOCK_KINDS = [k for k in KINDS if k != "f16"]


@pytest.mark.parametrize("kind", BLOCK_KINDS)
@pytest.mark.parametrize("cols", [256, 768, 2048])
def test_units_read_as_the_cpu_dequantizes(kind, cols):
    data, w = weight(kind, 5, cols, seed=cols)
    np.testing.assert_array_equal(dequant_rows(kind, data, cols), w)
    rnd = np.random.default_rng(cols).integers(0, 256, data.shape, dtype=np.uint8)   # any bytes, NaN scales too
    with np.errstate(all="ignore"):
        want = QMatrix(kind, rnd, cols).dequantize()
    np.testing.assert_array_equal(dequant_rows(kind, rnd, cols), want)


def test_float16_rows():
    m = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float16)
    np.testing.assert_array_equal(dequant_rows("f16", m.view(np.uint8), 64), m.astype(np.float32))


@pytest.mark.parametrize("kind", BLOCK_KINDS)
def test_the_product_is_the_cpu_kernels_on_rounded_activations(kind):
    data, w = weight(kind, 33, 512, seed=1)
    x = np.random.default_rng(2).standard_normal((6, 512)).astype(np.float32)
    out = np.zeros((6, 33), np.float32)
    xr = round_act_for(kind, x)                  # the CPU kernel rounds x to 8 bits first; the GPU does not
    ref_quant.qmatmul(kind, data, 33, 512, xr, 512, 6, out, 33, 0)
    cpu = qmatmul(x, QMatrix(kind, data, 512))
    np.testing.assert_allclose(out, cpu, rtol=1e-5, atol=1e-5 * np.abs(cpu).max())


def test_read_only_weights_are_dequantized_once_and_writable_ones_every_time(monkeypatch):
    data, w = weight("q4_0", 4, 64)
    calls = []
    real = ref_quant.dequant_rows
    monkeypatch.setattr(ref_quant, "dequant_rows", lambda *a: calls.append(1) or real(*a))
    x, out = np.ones((1, 64), np.float32), np.zeros((1, 4), np.float32)
    frozen = data.copy()
    frozen.flags.writeable = False
    for _ in range(3):
        ref_quant.qmatmul("q4_0", frozen, 4, 64, x, 64, 1, out, 4, 0)
    assert len(calls) == 1
    live = data.copy()
    ref_quant.qmatmul("q4_0", live, 4, 64, x, 64, 1, out, 4, 0)
    live[:] = 0                                  # a buffer that can change is read again
    ref_quant.qmatmul("q4_0", live, 4, 64, x, 64, 1, out, 4, 0)
    np.testing.assert_array_equal(out, 0)
    assert len(calls) == 3


def test_bad_kinds_and_widths_are_refused():
    with pytest.raises(BadDeviceMatrix, match="q5_0"):
        row_bytes("q5_0", 64)
    with pytest.raises(BadDeviceMatrix, match="256"):
        row_bytes("q4_k", 576)
    with pytest.raises(BadDeviceMatrix, match="uint8"):
        dequant_rows("q8_0", np.zeros((2, 33), np.uint8), 32)
