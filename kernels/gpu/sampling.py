"""The last shard's sampler with the logits on the device: they never leave it, only the tokens and
the log-probabilities asked for come back.

A batch whose rows are all greedy and unpenalized (temperature 0: the common serving case and
every benchmark) is answered by one kernel (greedy_top) and one small copy back; any other batch
goes through kernels.sampling.sample itself, which runs on the device's array module (cupy's
ops on a GPU). Either way the result is sample's: same tokens, same log-probabilities up to the
order of a sum, BadLogits for the same rows."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kernels.gpu import ops
from kernels.sampling import BadLogits, SampleResult, _check_batch, greedy, sample


class DeviceSampler:
    """Callable as kernels.sampling.sample, for logits (B, V) float32 on `dev`, contiguous."""

    def __init__(self, dev):
        self.dev = dev
        self._rows = None             # arange on the device, grown as batches grow

    def __call__(self, logits, params: Sequence, histories: Sequence, steps: Sequence[int]) -> SampleResult:
        self.dev.follow()                 # the logits may come from the caller's stream (a row subset)
        with self.dev.activate():
            if not all(greedy(p) and not p.penalized for p in params):
                return sample(logits, params, histories, steps)
            return self._greedy(logits, params, histories, steps)

    def _greedy(self, logits, params, histories, steps) -> SampleResult:
        dev = self.dev
        b, v = _check_batch(logits, params, histories, steps)
        n = min(max((p.top_logprobs for p in params), default=0), v)
        logits = dev.xp.ascontiguousarray(logits)
        out = dev.zeros(b * (3 + 2 * n), np.int32)
        ops.greedy_top(dev, logits, self._row_index(b), n, out)
        host = dev.download(out)
        f32 = host.view(np.float32)
        tokens, logprobs, rowmax = host[:b], f32[b:2 * b], f32[2 * b:3 * b]
        bad = np.flatnonzero(~np.isfinite(rowmax))
        if bad.size:
            raise BadLogits(bad)
        top = 3 * b
        return SampleResult(tokens.copy(), logprobs.copy(), host[top:top + b * n].reshape(b, n).copy(),
                            f32[top + b * n:top + 2 * b * n].reshape(b, n).copy())

    def _row_index(self, b: int):
        if self._rows is None or self._rows.shape[0] < b:
            self._rows = self.dev.to_device(np.arange(max(b, 128), dtype=np.int32))
        return self._rows[:b]
