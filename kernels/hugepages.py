"""Whether numpy asks Linux for transparent huge pages on large arrays; a shard turns it off.

NumPy advises MADV_HUGEPAGE on every allocation of 4 MiB or more. Where the kernel's THP defrag
policy is `madvise` (the common default), the first touch of each 2 MiB of such an array may
compact memory synchronously, in the middle of a step. A shard touches new KV pages, and new
buffers for each new batch size, for as long as it serves: at C=8 on the default model one step
of 74 tokens took 370 ms instead of 90, 320 ms of it in the kernel. Without the advice the first
pass over a replay of that run took 6.9 s instead of 7.8, and later passes took the same time
either way (the weights are file mappings, which this advice does not touch).
"""

from __future__ import annotations

try:
    from numpy._core.multiarray import _set_madvise_hugepage
except ImportError:   # numpy 1.x
    try:
        from numpy.core.multiarray import _set_madvise_hugepage
    except ImportError:
        _set_madvise_hugepage = None


def advise_hugepages(enabled: bool) -> bool | None:
    """Whether arrays allocated from now on in this process ask for huge pages; returns the
    previous setting (None where this numpy has no such setting, and nothing changes)."""
    if _set_madvise_hugepage is None:
        return None
    return bool(_set_madvise_hugepage(enabled))
