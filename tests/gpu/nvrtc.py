"""NVRTC, the compiler cupy's RawModule runs on a GPU machine, called here through ctypes where its
library is installed (the CUDA toolkit, or the nvidia-cuda-nvrtc wheel cupy brings): it compiles
without a GPU, and without the system headers nvcc's compile implicitly includes."""

from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path

NAMES = ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")


def load() -> ctypes.CDLL | None:
    """The NVRTC library, or None where it is not installed."""
    candidates = list(NAMES)
    spec = importlib.util.find_spec("nvidia")                  # the nvidia-cuda-nvrtc wheels' namespace
    for root in (spec.submodule_search_locations or []) if spec else []:
        candidates += [str(p) for p in sorted(Path(root).glob("cu*/lib/libnvrtc.so*")) if "builtins" not in p.name]
        candidates += [str(p) for p in sorted(Path(root).glob("cuda_nvrtc/lib/libnvrtc.so*"))]
    for name in candidates:
        try:
            for builtins in sorted(Path(name).parent.glob("libnvrtc-builtins.so*")) if "/" in name else ():
                ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)      # what it opens by name at compile time
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def compile_ptx(lib: ctypes.CDLL, source: str, name: str, options: tuple[str, ...]) -> tuple[int, str, str]:
    """(result code, log, PTX) of compiling `source` (0 is NVRTC_SUCCESS)."""
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None)
    if rc:
        return rc, "nvrtcCreateProgram failed", ""
    try:
        opts = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
        rc = lib.nvrtcCompileProgram(prog, len(options), opts)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        ptx = ""
        if rc == 0:
            lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
            buf = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetPTX(prog, buf)
            ptx = buf.value.decode()
        return rc, log.value.decode(errors="replace"), ptx
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
