"""Names for a model file: one that is equal on every machine holding a copy, one for caches.

Both hash the size and the first and last MiB, not the whole file: a multi-GB GGUF would take
seconds to minutes, which a respawn cannot afford. The head holds the metadata and tensor table
(architecture, shapes, types, offsets), the tail the last weights.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

_EDGE = 1 << 20


def model_identity(path: Path) -> str:
    """The same for every copy of the file: services on different machines that advertise the
    same identity serve the same model."""
    return _digest(path, mtime=False)


def file_identity(path: Path) -> str:
    """Also changes when the file is rewritten in place (mtime): keys the local weight cache."""
    return _digest(path, mtime=True)


def _digest(path: Path, mtime: bool) -> str:
    st = os.stat(path)
    h = hashlib.sha256(f"{st.st_size}:{st.st_mtime_ns if mtime else ''}:".encode())
    with open(path, "rb") as f:
        h.update(f.read(_EDGE))
        if st.st_size > _EDGE:
            f.seek(max(_EDGE, st.st_size - _EDGE))
            h.update(f.read(_EDGE))
    return h.hexdigest()[:32]
