"""The CUDA C sources of kernels/gpu/cuda, with their quoted #includes inlined: NVRTC then needs no
include path, and cupy's compile cache (keyed by the source text) misses when a header changes."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

CUDA_DIR = Path(__file__).parent / "cuda"
_INCLUDE = re.compile(r'^#include "([\w.]+)"\s*$', re.M)


@lru_cache(maxsize=None)
def source_text(name: str) -> str:
    """The text of cuda/<name>, each `#include "x.cuh"` replaced by that file (once: later
    includes of the same file are dropped, as its guard would drop them)."""
    seen: set[str] = set()

    def inline(file: str) -> str:
        if file in seen:
            return ""
        seen.add(file)
        text = (CUDA_DIR / file).read_text()
        return _INCLUDE.sub(lambda m: inline(m.group(1)), text)

    return inline(name)


def source_files() -> list[str]:
    """The compiled units (the .cu files; headers are inlined into them)."""
    return sorted(p.name for p in CUDA_DIR.glob("*.cu"))
