"""Activation codecs through the real envelope: exactness, error bounds, sizes, edge values."""

import numpy as np
import pytest

import wire
from wire.codecs import FP16_MAX, INT8_BLOCK, RAW_DTYPES, TINY, Int8, relative_error
from wire.messages.bus import Echo

from .activations import activations

# Error bounds stated as numbers (relative L2 over the tensor, and over each row = token).
FP16_REL = 3e-4          # measured 1.9e-4 .. 2.4e-4 on the synthetic activations
FP16_ELEM = 2.0 ** -11   # half has an 11-bit significand: round-to-nearest error per value
FP16_ABS = 2.0 ** -25    # half of the smallest half subnormal, for values near zero
INT8_REL = 0.015         # with outlier channels: measured 1.0% .. 1.24%, rows up to 1.36%
INT8_REL_PLAIN = 0.01    # no outliers: measured 0.69% .. 0.72%, rows up to 0.86%


def round_trip(x: np.ndarray, codec: str) -> tuple[np.ndarray, wire.Tensor, list]:
    frames = wire.encode(wire.Message(Echo(payload=wire.Tensor(x, codec))))
    t = wire.decode([bytes(f) for f in frames]).body.payload
    return t.array(), t, frames


def payload_bytes(frames) -> int:
    return sum(len(f) for f in frames[1:])


def row_errors(x, y):
    return np.linalg.norm(x - y, axis=1) / np.linalg.norm(x, axis=1)


# ------------------------------------------------------------------------------------ fp32


def test_fp32_is_bit_exact_with_special_values():
    x = activations(8)
    x[0, :8] = [np.inf, -np.inf, np.nan, -0.0, 0.0, 1e-45, -3.4e38, np.float32(1.17e-38)]
    x[1, 0] = np.frombuffer(np.uint32(0x7FC12345).tobytes(), np.float32)[0]  # NaN with payload
    y, t, frames = round_trip(x, "fp32")
    assert y.dtype == np.float32 and y.shape == x.shape
    assert np.array_equal(y.view(np.uint32), x.view(np.uint32))
    assert payload_bytes(frames) == 4 * x.size


# ------------------------------------------------------------------------------------ fp16


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("outliers", [0, 6])
def test_fp16_error_on_activations(seed, outliers):
    x = activations(64, seed=seed, outliers=outliers)
    y, t, frames = round_trip(x, "fp16")
    assert y.dtype == np.float32 and y.shape == x.shape
    assert relative_error(x, y) < FP16_REL
    assert row_errors(x, y).max() < FP16_REL * 2
    assert np.all(np.abs(y - x) <= np.maximum(np.abs(x) * FP16_ELEM, FP16_ABS))
    assert payload_bytes(frames) == 2 * x.size


def test_fp16_keeps_inf_nan_and_saturates_finite_values():
    x = np.array([np.inf, -np.inf, np.nan, 1e5, -1e30, 65504, 65519, -65520, 3.4e38, -0.0, 0.0],
                 np.float32)
    y, _, _ = round_trip(x, "fp16")
    assert y[0] == np.inf and y[1] == -np.inf and np.isnan(y[2])
    assert list(y[3:9]) == [FP16_MAX, -FP16_MAX, FP16_MAX, FP16_MAX, -FP16_MAX, FP16_MAX]
    assert np.signbit(y[9]) and not np.signbit(y[10]) and y[9] == 0 and y[10] == 0


# ------------------------------------------------------------------------------------ int8


@pytest.mark.parametrize("seed", range(3))
def test_int8_error_on_activations_with_outliers(seed):
    x = activations(64, seed=seed)
    y, t, frames = round_trip(x, "int8")
    assert t.meta == {"block": INT8_BLOCK}  # per-row scales are too coarse next to outliers
    assert relative_error(x, y) < INT8_REL
    assert row_errors(x, y).max() < INT8_REL
    assert payload_bytes(frames) == x.size + 64 * (576 // INT8_BLOCK) * 4   # 1.125 B/value
    assert payload_bytes(frames) / x.size < 1.13


@pytest.mark.parametrize("seed", range(3))
def test_int8_error_on_activations_without_outliers(seed):
    x = activations(64, seed=seed, outliers=0)
    y, _, _ = round_trip(x, "int8")
    assert relative_error(x, y) < INT8_REL_PLAIN
    assert row_errors(x, y).max() < INT8_REL_PLAIN * 1.5


def test_int8_uses_one_scale_per_row_when_that_is_accurate_enough():
    x = np.random.default_rng(0).standard_normal((64, 576)).astype(np.float32)
    y, t, frames = round_trip(x, "int8")
    assert t.meta == {"block": 0}
    assert relative_error(x, y) < 0.01        # measured 0.75%
    assert payload_bytes(frames) == x.size + 64 * 4


def test_int8_error_per_value_is_at_most_half_a_step():
    x = activations(16, seed=5)
    y, t, _ = round_trip(x, "int8")
    step = np.abs(x).reshape(16, -1, INT8_BLOCK).max(axis=2) / 127            # (rows, groups)
    bound = np.repeat(step, INT8_BLOCK, axis=1) * 0.5001
    assert np.all(np.abs(y - x) <= bound)


def test_int8_keeps_zeros_and_signs():
    x = activations(4, seed=1)
    x[:, ::7] = 0.0
    y, t, _ = round_trip(x, "int8")
    assert np.all(y[:, ::7] == 0)
    step = np.abs(x).max() / 127
    big = np.abs(x) > step
    assert np.array_equal(np.sign(y[big]), np.sign(x[big]))
    assert np.all(np.sign(y) * np.sign(x) >= 0)  # a value never comes back with the other sign


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_int8_refuses_non_finite_values(bad):
    x = activations(2)
    x[1, 3] = bad
    with pytest.raises(ValueError, match="inf or NaN"):
        wire.encode(wire.Message(Echo(payload=wire.Tensor(x, "int8"))))


def test_int8_tiny_values_stay_finite_and_close():
    x = np.array([[1e-40, -3e-41, 0.0, 1e-45], [1e-38, 5e-39, -1e-38, 2e-39]], np.float32)
    y, _, _ = round_trip(x, "int8")
    assert np.all(np.isfinite(y))
    assert np.all(np.abs(y - x) <= TINY)


def test_int8_huge_values_stay_finite_and_close():
    x = np.array([[3.4e38, -3.4e38, 1.0, 0.0]], np.float32)
    y, _, _ = round_trip(x, "int8")
    assert np.all(np.isfinite(y))
    assert np.all(np.abs(y - x) <= 3.4e38 / 127 / 2 * 1.0001)


@pytest.mark.parametrize("block", [0, 1, 7, 32, 100, 576, 1000])
def test_int8_explicit_blocks_round_trip(block, monkeypatch):
    # A peer may choose its own block; decode follows the meta, with a short last block too.
    monkeypatch.setitem(wire.CODECS, "int8", Int8(block=block))
    x = activations(3, seed=2)[:, :200]
    y, t, frames = round_trip(np.ascontiguousarray(x), "int8")
    assert t.meta == {"block": block}
    groups = 1 if block in (0,) or block >= 200 else -(-200 // block)
    assert payload_bytes(frames) == 3 * 200 + 3 * groups * 4
    assert relative_error(x, y) < 0.05


# ------------------------------------------------------------------------ every codec


@pytest.mark.parametrize("codec", ["fp32", "fp16", "int8"])
@pytest.mark.parametrize("shape", [(0, 576), (3, 0), (), (1,), (1, 1), (2, 3, 4)])
def test_empty_scalar_and_small_shapes(codec, shape):
    x = np.full(shape, -2.5, np.float32)
    y, t, _ = round_trip(x, codec)
    assert y.shape == shape and y.dtype == np.float32
    assert np.array_equal(y, x)  # -2.5 is exact in every codec (int8: it is the row's max)


@pytest.mark.parametrize("codec", ["fp32", "fp16", "int8"])
def test_all_zeros_come_back_as_zeros(codec):
    y, _, _ = round_trip(np.zeros((5, 576), np.float32), codec)
    assert np.array_equal(y, np.zeros((5, 576), np.float32))


@pytest.mark.parametrize("codec", ["fp32", "fp16", "int8"])
@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32])
def test_activation_codecs_take_float32_only(codec, dtype):
    with pytest.raises(ValueError, match="float32"):
        wire.encode(wire.Message(Echo(payload=wire.Tensor(np.ones(4, dtype), codec))))


@pytest.mark.parametrize("dtype", sorted(RAW_DTYPES))
def test_raw_carries_every_listed_dtype_bit_exact(dtype):
    x = (np.arange(24) % 5).astype(dtype).reshape(2, 3, 4)
    y, t, frames = round_trip(x, "raw")
    assert y.dtype == np.dtype(dtype) and np.array_equal(y, x)
    assert payload_bytes(frames) == x.nbytes


def test_raw_refuses_other_dtypes_and_unknown_codecs():
    with pytest.raises(ValueError):
        wire.encode(wire.Message(Echo(payload=wire.Tensor(np.ones(2, np.complex64), "raw"))))
    with pytest.raises(ValueError, match="unknown codec"):
        wire.Tensor(np.ones(2, np.float32), "bf16")


def test_non_contiguous_input_is_encoded_by_value():
    x = activations(8)[::2, ::3]
    for codec in ("fp32", "fp16"):
        y, _, _ = round_trip(x, codec)
        assert y.shape == x.shape and np.allclose(y, x, rtol=FP16_ELEM)
