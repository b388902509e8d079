"""Grammar masks on cupy logits: the same rows masked as on numpy, on the device."""

import numpy as np
import pytest

from kernels.token_masks import apply_token_masks

cp = pytest.importorskip("cupy")
pytestmark = pytest.mark.gpu

V = 49152


def test_masks_on_the_device_match_numpy():
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((4, V)).astype(np.float32)
    masks = rng.integers(0, 2 ** 32, (2, (V + 31) // 32), dtype=np.uint64).astype(np.uint32)
    host = apply_token_masks(logits, [0, 3], masks)
    dev = apply_token_masks(cp.asarray(logits), [0, 3], masks)
    assert isinstance(dev, cp.ndarray) and dev.dtype == cp.float32
    assert np.array_equal(cp.asnumpy(dev), host)
