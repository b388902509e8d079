"""On-disk cache of a shard's layer range, so a respawned shard serves again in well under 2 s.

Layout: <cache_dir>/weights/<file identity>/<start>-<end>-<format>-v<LAYOUT>/ holding
manifest.json and one .npy per array, loaded back with np.load(mmap_mode="r") (no copy, no
GGUF parsing, no fusing of q|k|v and gate|up or stacking of layers: that was done once, when
the entry was built, straight into its files).
The format is a float dtype ("float32", "float16": dequantized) or "quantized" (GGUF's blocks
where the native kernel has their kind; the manifest names each array's kind), or "quantized_t16":
"quantized" with the Q4_0 layer matrices in tiles of 16 rows (kernels.q4_0_tiles), what a CPU shard
on the AVX-512 path multiplies fastest (services.shard.service.weight_format picks it). A tied output
head is stored once. A directory is built under a temporary name and renamed into place, so
readers only ever see complete entries.

Entries are keyed by `file_identity` (services/modelstore/identity.py): size, mtime and the
hash of the file's edges, so any rewrite or re-download of the file misses the cache.

Each load touches its entry's manifest; after an entry is written, the cache is cut back to its
budget ($LLMBUS_WEIGHT_CACHE_GB, least recently used first: services/modelstore/cache_budget.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from kernels.qmatrix import QUANT_KINDS, QMatrix, QRows
from services.modelstore.cache_budget import CacheEntry, budget_bytes, to_remove
from services.modelstore.gguf_config import ModelConfig
from services.modelstore.identity import file_identity  # noqa: F401  (part of this module's API)
from services.modelstore.pull import cache_dir
from services.modelstore.quantized import QLayers, QStack
from services.modelstore.weights import ShardWeights, read_weights

LAYOUT_VERSION = 3   # bump when the stored arrays change meaning or shape (3: K kinds kept in blocks)
QUANTIZED = "quantized"
QUANTIZED_TILES = "quantized_t16"
TILED_FIELDS = ("wqkv", "wo", "w_gate_up", "w_down")     # the layer matrices: nothing looks their rows up
_ENTRY_NAME = re.compile(r"^\d+-\d+-\w+-v(\d+)$")

log = logging.getLogger("llmbus.modelstore")


@dataclass
class LoadedWeights:
    config: ModelConfig
    weights: ShardWeights
    cold: bool          # True when the GGUF was read and dequantized (and the cache written)
    seconds: float
    path: Path          # the cache entry


def entry_path(model: Path, start: int, end: int, dtype: str, root: Path | None = None) -> Path:
    root = (root or cache_dir()) / "weights"
    fmt = dtype if dtype in (QUANTIZED, QUANTIZED_TILES) else np.dtype(dtype).name
    return root / file_identity(model) / f"{start}-{end}-{fmt}-v{LAYOUT_VERSION}"


def load_weights(model: Path, start: int, end: int, dtype: str = "float32",
                 root: Path | None = None) -> LoadedWeights:
    """Weights of layers [start, end) from the cache, building the entry first if it is missing.

    dtype: a float dtype to dequantize to, "quantized" or "quantized_t16" (see the module's docstring)."""
    t0 = time.perf_counter()
    entry = entry_path(Path(model), start, end, dtype, root)
    if entry.is_dir():
        try:
            config, weights = _read_entry(entry, start, end)
            _touch(entry)
            return LoadedWeights(config, weights, False, time.perf_counter() - t0, entry)
        except (OSError, ValueError, KeyError):
            shutil.rmtree(entry, ignore_errors=True)   # damaged entry: rebuild it below
    try:
        _build_entry(Path(model), start, end, dtype, entry)
    except OSError as e:
        # The cache is an optimisation: a read-only or full cache serves from the GGUF.
        _warn_once(entry.parent.parent, e)
        return LoadedWeights(*_read_gguf(Path(model), start, end, dtype), True, time.perf_counter() - t0, entry)
    prune(entry.parent.parent, keep=entry)
    # Served from the entry just written, as a warm load would be: its pages are the ones the
    # build wrote (still in memory), and the GGUF's mapping (whose pages the build read, and
    # which an embedding or head kept as a view of it would hold resident) is let go, so a shard
    # that built its own range holds that range's bytes once, not twice.
    try:
        config, weights = _read_entry(entry, start, end)
        _touch(entry)
    except (OSError, ValueError, KeyError):      # removed at once by another process's prune
        config, weights = _read_gguf(Path(model), start, end, dtype)
    return LoadedWeights(config, weights, True, time.perf_counter() - t0, entry)


def _build_entry(model: Path, start: int, end: int, dtype: str, entry: Path) -> None:
    """Write the entry for layers [start, end) of `model`. The stacked layer matrices are copied
    from the GGUF straight into their files' mappings (space reserved first: a full disk is an
    OSError here, not a SIGBUS on a page later), never into anonymous memory: a range of an 8B
    model is 1.3 GB, and on a host whose memory limit counts page cache, that copy and the
    written pages together (2.6 GB under a 2.2 GiB limit) made the kernel write the new pages
    back to disk before it could free them, then read them in again (a cold start of 33 s where
    a warm one took 8.5)."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
    try:
        built = _read_gguf(model, start, end, dtype,
                           stack_into=lambda name, shape: _npy_for_writing(tmp / f"{name}.npy", shape))
        _write_entry(tmp, *built)
        del built
        try:
            os.rename(tmp, entry)
        except OSError:
            if not entry.is_dir():                     # lost a race to a complete entry is fine
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _npy_for_writing(path: Path, shape: tuple[int, ...]) -> np.ndarray:
    """A new .npy file of uint8 `shape`, its space reserved, mapped for writing."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "|u1", "fortran_order": False, "shape": shape})
        offset = f.tell()
        size = int(np.prod(shape))
        if size:
            os.posix_fallocate(f.fileno(), offset, size)
    return np.lib.format.open_memmap(path, mode="r+")


def _read_gguf(model: Path, start: int, end: int, dtype: str,
               stack_into=None) -> tuple[ModelConfig, ShardWeights]:
    """Layers [start, end) read from the GGUF (`stack_into`: see read_weights)."""
    if dtype == QUANTIZED_TILES:
        config, weights = read_weights(model, start, end, np.float32, quantized=True, stack_into=stack_into)
        return config, tiled(weights)
    if dtype == QUANTIZED:
        return read_weights(model, start, end, np.float32, quantized=True, stack_into=stack_into)
    return read_weights(model, start, end, np.dtype(dtype))


def tiled(weights: ShardWeights) -> ShardWeights:
    """`weights` with each Q4_0 stack of layer matrices tiled where it lies (its file's mapping while
    an entry is built, else the memory read_weights gave it): the same bytes, no copy."""
    from kernels.native_lib import load
    from kernels.q4_0_tiles import TILED, tile_in_place
    lib = load()
    if lib is None:
        raise ValueError(f"the {QUANTIZED_TILES} format needs the native library (pip install -e .)")
    changed = {}
    for name in TILED_FIELDS:
        s = getattr(weights, name)
        if isinstance(s, QStack) and s.kind == "q4_0":
            for layer in s.data:
                tile_in_place(lib, layer)
            changed[name] = QStack(TILED, s.data, s.cols)
    return replace(weights, **changed)


_warned: set[Path] = set()


def _warn_once(root: Path, e: OSError) -> None:
    if root not in _warned:
        _warned.add(root)
        log.warning("weight cache: cannot write under %s (%s): serving without caching (a "
                    "restart reads the GGUF again)", root, e.strerror or e)


def page_in(weights: ShardWeights) -> None:
    """Read one byte of every page of the weights, so that a mapped entry's pages come in from disk
    while a shard loads, not in its first forward: a forward waiting on the disk shows no CPU time,
    and a health watcher takes a process with work and no CPU time for stalled (a range of an 8B
    model is 1.4 GB)."""
    for a in weights.buffers():
        int(a.reshape(-1).view(np.uint8)[::4096].sum())


def prune(weights_root: Path, keep: Path, budget: int | None = None) -> list[Path]:
    """Cut the cache under `weights_root` back to its budget, never removing `keep`; returns what
    was removed. A process still mapping a removed entry keeps its pages (POSIX unlink); one
    reading it at that moment finds it damaged and builds it again."""
    budget = budget_bytes(dict(os.environ)) if budget is None else budget
    gone = to_remove(_scan(weights_root), budget, LAYOUT_VERSION, keep, time.time())
    for path in gone:
        shutil.rmtree(path, ignore_errors=True)
        with _suppress_os():
            path.parent.rmdir()                 # the file's last entry: its folder too
    if gone:
        log.info("weight cache: removed %d entries to stay within %.1f GiB (%s)", len(gone),
                 budget / 2**30, ", ".join(f"{p.parent.name[:8]}/{p.name}" for p in gone))
    return gone


def _scan(weights_root: Path) -> list[CacheEntry]:
    entries = []
    for ident in _dirs(weights_root):
        for d in _dirs(ident):
            m = _ENTRY_NAME.match(d.name)
            if m is None and not d.name.startswith("."):
                continue                      # not ours: leave it alone
            with _suppress_os():
                files = list(os.scandir(d))
                size = sum(f.stat().st_size for f in files if f.is_file())
                manifest = d / "manifest.json"
                used = (manifest if manifest.exists() else d).stat().st_mtime
                entries.append(CacheEntry(d, size, used, int(m.group(1)) if m else None))
    return entries


def _dirs(path: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _touch(entry: Path) -> None:
    """Mark the entry used (least recently used entries are removed first)."""
    with _suppress_os():                      # a read-only cache still serves
        os.utime(entry / "manifest.json")


def _suppress_os():
    return contextlib.suppress(OSError)


def _read_entry(entry: Path, start: int, end: int) -> tuple[ModelConfig, ShardWeights]:
    manifest = json.loads((entry / "manifest.json").read_text())
    config = ModelConfig.from_json(manifest["config"])
    quant = manifest.get("quantized", {})
    mixed = manifest.get("mixed", {})
    arrays = {}
    for name in manifest["arrays"]:
        a = np.load(entry / f"{name}.npy", mmap_mode="r")
        if name in mixed:
            a = _mixed_layers(a.view(np.ndarray), mixed[name])
        elif name in quant:
            kind, cols = quant[name]
            a = a.view(np.ndarray)         # a plain view: np.memmap's subclass slows every slice of it
            a = QStack(kind, a, cols) if a.ndim == 3 else QMatrix(kind, a, cols)
        arrays[name] = a
    for name, same in manifest.get("aliases", {}).items():
        arrays[name] = arrays[same]
    return config, ShardWeights(start=start, end=end, **arrays)


def _write_entry(tmp: Path, config: ModelConfig, weights: ShardWeights) -> None:
    """The arrays not yet in `tmp` (each built straight into its file is there already), then
    the manifest."""
    arrays = weights.arrays()
    aliases = {}
    if weights.output is not None and weights.output is weights.token_embd:
        aliases["output"] = "token_embd"                  # a tied head: stored once
        del arrays["output"]
    quant = {}
    mixed = {}
    for name, a in arrays.items():
        if isinstance(a, QLayers):
            mixed[name], a = _mixed_bytes(a)
        elif isinstance(a, (QStack, QMatrix)):
            quant[name] = [a.kind, a.cols]
            a = a.data
        path = tmp / f"{name}.npy"
        # Built in place: its pages are the file's (no msync: np.save never waited for the disk
        # either, and the page cache serves them to every reader meanwhile).
        if not (isinstance(a, np.memmap) and a.filename and Path(a.filename).resolve() == path.resolve()):
            np.save(path, a)
    (tmp / "manifest.json").write_text(json.dumps({"config": config.to_json(), "arrays": sorted(arrays),
                                                   "quantized": quant, "mixed": mixed,
                                                   "aliases": aliases}))


def _mixed_bytes(layers: QLayers) -> tuple[list, np.ndarray]:
    """A QLayers as one flat byte array and, per layer, its parts' [kind, rows, cols]."""
    mats = [m.parts if isinstance(m, QRows) else (m,) for m in layers.layers]
    spec = [[[p.kind, p.rows, p.cols] for p in parts] for parts in mats]
    return spec, np.concatenate([p.data.reshape(-1) for parts in mats for p in parts])


def _mixed_layers(flat: np.ndarray, spec: list) -> QLayers:
    """The QLayers _mixed_bytes stored: views of `flat`, no copy."""
    layers, at = [], 0
    for parts in spec:
        ms = []
        for kind, rows, cols in parts:
            n = rows * (cols // QUANT_KINDS[kind][0] * QUANT_KINDS[kind][1])
            ms.append(QMatrix(kind, flat[at:at + n].reshape(rows, -1), cols))
            at += n
        layers.append(ms[0] if len(ms) == 1 else QRows(tuple(ms)))
    if at != flat.size:
        raise ValueError(f"mixed-kind entry holds {flat.size} bytes, its manifest {at}")
    return QLayers(tuple(layers))
