"""The optional C library (kernels/native, built by `pip install -e .` as kernels/_native*.so).

Loaded once, lazily, with ctypes; ctypes releases the GIL for each call, so a service's event
loop keeps running while a kernel computes. Without the library (no C compiler at install) the
callers compute the same thing with numpy.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

P, I64, INT, F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float

SIGNATURES = {
    "lb_qmatmul": (INT, [INT, P, I64, I64, P, I64, P]),
    "lb_set_isa": (INT, [INT]),
    "lb_isa": (INT, []),
    "lb_q4_0_tile": (INT, [P, I64, I64, P]),
    "lb_q4_0_untile": (INT, [P, I64, I64, P]),
    "lb_q4_0_tile_in_place": (INT, [P, I64, I64]),
    "lb_round_act": (INT, [P, I64, I64, P]),
    "lb_round_act_k": (INT, [P, I64, I64, P, P]),
    "lb_attend_decode": (INT, [P, P, P, P, P, I64, I64, I64, I64, I64, I64, I64, I64, F32, P]),
    "lb_rms_norm": (INT, [P, P, P, I64, I64, F32, P]),
    "lb_rope_write_kv": (INT, [P, I64, I64, I64, I64, I64, P, P, P, P, P, P, I64, I64, P]),
    "lb_rms_norm_heads": (INT, [P, I64, I64, I64, I64, P, F32]),
    "lb_add_bias": (INT, [P, P, I64, I64]),
    "lb_geglu": (INT, [P, I64, I64, P, P]),
    "lb_swiglu": (INT, [P, I64, I64, P]),
    "lb_run_ops": (INT, [P, I64, P]),
    "lb_run_ops_timed": (INT, [P, I64, P, P]),
    "lb_decode_plan": (INT, [P, P, P, P, I64, I64, I64, I64, I64, P, P, P, P, P, P]),
    "lb_mark_written": (None, [P, P, P, I64]),
    "lb_set_threads": (INT, [INT]),
    "lb_threads": (INT, []),
    "lb_pool_noop": (INT, [I64, I64]),
    "lb_pool_read": (ctypes.c_uint64, [P, I64]),
}

# The code paths lb_set_isa takes (qmatmul.h's LB_ISA_*; "auto": the best this CPU has).
ISAS = {"auto": -1, "generic": 0, "avx2": 1, "avx512": 2}

_lib: ctypes.CDLL | None = None
_tried = False


def library_path() -> Path | None:
    """The built library; LLMBUS_NATIVE_LIB names another build of it (the tests' emulated AVX-512)."""
    if os.environ.get("LLMBUS_NATIVE_LIB"):
        return Path(os.environ["LLMBUS_NATIVE_LIB"])
    found = sorted(Path(__file__).resolve().parent.glob("_native*.so"))
    return found[0] if found else None


def wanted_isa() -> int:
    """The code path LLMBUS_ISA asks this process's kernels for (ISAS' names; unset: auto), to
    measure or check a narrower path than the CPU's best, as a machine without AVX-512 runs it."""
    name = os.environ.get("LLMBUS_ISA", "").strip() or "auto"
    if name not in ISAS:
        raise ValueError(f"LLMBUS_ISA={name!r} is not a code path: one of {', '.join(ISAS)}")
    return ISAS[name]


def load() -> ctypes.CDLL | None:
    """The library with its functions typed, on the code path LLMBUS_ISA names (the best one this
    CPU has where it names one the CPU lacks), or None when it is not built (or is stale)."""
    global _lib, _tried
    if not _tried:
        isa = wanted_isa()                  # a bad value is refused at every call, not once
        _tried = True
        path = library_path()
        if path is not None:
            try:
                lib = ctypes.CDLL(str(path))
                for name, (res, args) in SIGNATURES.items():
                    fn = getattr(lib, name)
                    fn.restype, fn.argtypes = res, args
            except (OSError, AttributeError):
                lib = None                      # a foreign or stale build: numpy it is
            if lib is not None and isa >= 0:
                lib.lb_set_isa(isa)
            _lib = lib
    return _lib


def set_threads(n: int) -> int:
    """Threads the native kernels split each call over (this process, the caller included); returns
    the count now in use (1 without the library). Any count gives the same bits."""
    if n < 1:
        raise ValueError(f"threads must be at least 1, got {n}")
    lib = load()
    return 1 if lib is None else int(lib.lb_set_threads(int(n)))


def threads() -> int:
    """Threads the native kernels use now (1 without the library)."""
    lib = load()
    return 1 if lib is None else int(lib.lb_threads())
