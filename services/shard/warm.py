"""Build a layer range's weight-cache entry in a process of its own.

A shard loading the range of a new placement keeps serving its current range meanwhile. Building
a cache entry (parsing the GGUF, repacking blocks) is long Python work that would hold the GIL
and starve the event loop (heartbeats stop, and peers take the shard for dead); in a child
process it cannot. The shard then only maps the finished entry.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]


def warm(model: Path, start: int, end: int, fmt: str, timeout: float = 1800.0) -> None:
    """Make sure the cache entry of layers [start, end) in `fmt` exists; RuntimeError if the
    child that builds it fails."""
    from services.modelstore.weight_cache import entry_path
    if entry_path(model, start, end, fmt).is_dir():
        return
    argv = [sys.executable, "-m", "services.shard.warm", str(model), str(start), str(end), fmt]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(_ROOT), os.environ.get("PYTHONPATH"))))}
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"building the weights of layers {start}:{end} failed: "
                           f"{r.stderr.strip()[-500:]}")


def main(argv: list[str]) -> int:
    from services.modelstore.weight_cache import load_weights
    model, start, end, fmt = argv
    load_weights(Path(model), int(start), int(end), fmt)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
