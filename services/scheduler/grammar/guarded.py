"""What the driver asks of a request's grammar, one thread at a time: it asks from its event loop,
or from a worker thread for a batch of many constrained rows (pipelines/driver.py)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np


class Guarded:
    """`mask` and `forced` under the grammar's lock; a subclass gives `_mask` and `_forced`."""

    holds_whole_answer = True      # False: only parts of it (a tool call the model opens)

    def __init__(self):
        self._lock = threading.Lock()

    def mask(self, generated: Sequence[int]) -> np.ndarray | None:
        """The packed mask (uint32 words) for the draw after `generated`; None: any token."""
        with self._lock:
            return self._mask(generated)

    def forced(self, generated: Sequence[int]) -> list[int]:
        """The tokens the grammar allows alone after `generated`: they need no draw."""
        with self._lock:
            return self._forced(generated)

    def _mask(self, generated: Sequence[int]) -> np.ndarray | None:
        raise NotImplementedError

    def _forced(self, generated: Sequence[int]) -> list[int]:
        raise NotImplementedError
