"""The CUDA sources against their declarations (kernels/gpu/kernels.py), checked without a GPU:
NVRTC (cupy's compiler, where its library is installed) and nvcc (where the toolkit is) compile
each file as cupy hands it over, and the PTX's entry points must be the declared kernels with the
declared parameter types, in order; each kernel's numpy reference takes the kernel's parameters by
name. NVRTC has no system headers: a source that compiles with nvcc alone (math.h's INFINITY, say)
fails there, at a GPU shard's first step."""

from __future__ import annotations

import inspect
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kernels.gpu.kernels import KERNELS, POINTERS
from kernels.gpu.sources import CUDA_DIR, source_files, source_text

PTX_TYPES = {**{p: ".u64" for p in POINTERS}, "i32": ".u32", "f32": ".f32", "f64": ".f64"}
ENTRY = re.compile(r"\.entry (\w+)\(([^)]*)\)")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict:
    """{kernel: (source file, [PTX parameter types])} of every entry point nvcc compiles for sm_90,
    with ptxas's report of each file (to find spills)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed here (the CUDA toolkit): the GPU tests compile the kernels instead")
    ptxas = str(Path(nvcc).with_name("ptxas"))     # the toolkit's own, beside nvcc, as nvcc runs it
    tmp = tmp_path_factory.mktemp("cuda")
    entries, reports = {}, {}
    for name in source_files():
        src = tmp / name
        src.write_text(source_text(name))          # as NVRTC gets it: headers inlined
        ptx = tmp / (name + ".ptx")
        r = subprocess.run([nvcc, "-ptx", "-arch=sm_90", "--std=c++14", str(src), "-o", str(ptx)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{name} does not compile:\n{r.stderr}"
        for m in ENTRY.finditer(ptx.read_text()):
            entries[m.group(1)] = (name, re.findall(r"\.param (\.\w+)", m.group(2)))
        # The PTX just written through ptxas, as `nvcc -cubin -Xptxas -v` would hand it over (the
        # same report, without compiling the source a second time: that was half of this fixture).
        r = subprocess.run([ptxas, "-arch=sm_90", "-v", str(ptx), "-o", str(tmp / (name + ".cubin"))],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        reports[name] = r.stderr
    return {"entries": entries, "reports": reports}


@pytest.fixture(scope="module")
def nvrtc_entries() -> dict:
    """{kernel: (source file, [PTX parameter types])} as NVRTC compiles the sources for compute_90."""
    from .nvrtc import compile_ptx, load
    lib = load()
    if lib is None:
        pytest.skip("no NVRTC library here (the CUDA toolkit, or cupy's nvidia-cuda-nvrtc wheel)")
    entries = {}
    for name in source_files():
        rc, log, ptx = compile_ptx(lib, source_text(name), name, ("--gpu-architecture=compute_90", "--std=c++14",
                                                                   "-default-device"))
        assert rc == 0, f"NVRTC cannot compile {name}:\n{log}"
        for m in ENTRY.finditer(ptx):
            entries[m.group(1)] = (name, re.findall(r"\.param (\.\w+)", m.group(2)))
    return entries


def test_nvrtc_compiles_every_kernel_as_declared(nvrtc_entries):
    check_entries(nvrtc_entries)


@pytest.mark.slow                  # nvcc, where the toolkit is: seconds a file
def test_nvcc_compiles_every_kernel_as_declared(compiled):
    check_entries(compiled["entries"])


def check_entries(entries: dict) -> None:
    assert set(entries) == set(KERNELS), "kernels compiled but not declared, or declared but not compiled"
    for k in KERNELS.values():
        source, types = entries[k.name]
        assert source == k.source, f"{k.name} is in {source}, declared in {k.source}"
        assert types == [PTX_TYPES[t] for t, _ in k.params], f"{k.name}: PTX {types}, declared {k.params}"


@pytest.mark.slow                  # nvcc, where the toolkit is: seconds a file
def test_no_kernel_spills_registers(compiled):
    # (A stack frame is allowed: double-precision cos/sin keep one for their slow argument reduction.)
    for name, report in compiled["reports"].items():
        assert "0 bytes spill stores" in report
        assert not re.search(r"[1-9]\d* bytes spill (stores|loads)", report), f"{name}:\n{report}"


def test_sources_include_only_their_own_headers():
    # NVRTC has no system headers: float16 goes through PTX's cvt (common.cuh), not cuda_fp16.h.
    for path in CUDA_DIR.iterdir():
        includes = re.findall(r"^#include\s+(\S+)", path.read_text(), re.M)
        assert all(re.fullmatch(r'"\w+\.cuh"', i) and (CUDA_DIR / i.strip('"')).exists() for i in includes), \
            (path.name, includes)
        assert "#include" not in source_text(path.name) or path.suffix == ".cuh"


def test_every_reference_takes_its_kernels_parameters():
    for k in KERNELS.values():
        sig = inspect.signature(k.reference)
        assert tuple(sig.parameters) == k.names, f"{k.name}: reference takes {tuple(sig.parameters)}"
