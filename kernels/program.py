"""A sequence of the C library's ops run as one call (kernels/native/program.c), Python steps between.

A decode step of the default model makes ~300 library calls; through ctypes each costs 1-2 us of
argument conversion and interpreter, about 0.5 ms a token, all of it on one thread while the
kernels' pool waits. A Program is built once for buffers that stay alive (their addresses are its
arguments) and run every step: each stretch of C ops is one lb_run_ops call, and a step that must stay
in Python (a float32 BLAS product, a trace) runs between stretches.
"""

from __future__ import annotations

import ctypes
from typing import Callable

import numpy as np

from kernels.qmatmul import qmatmul_args
from kernels.qmatrix import QMatrix, QRows

WORDS = 16           # an op: its code and up to 15 arguments (program.h)
CODES = {"qmatmul": 1, "rms_norm": 2, "rope_kv": 3, "attend": 4, "add_bias": 5, "norm_heads": 6,
         "geglu": 7, "add": 8, "copy_cols": 9, "swiglu": 10}
FLOATS = {"rms_norm": (6,), "attend": (14,), "norm_heads": (7,)}     # words holding a float argument
NO_MEMORY = {"qmatmul": -3, "attend": -4}                           # the codes that mean out of memory


class Program:
    """Ops appended in order (`op`, `matmul`, `py`), then `finish()`; calling it runs them all."""

    def __init__(self, lib):
        self.lib = lib
        self._ops: list[tuple[str, tuple, str]] = []      # (name, arguments, where) of every C op
        self._steps: list = []                            # (first op, count) or a Python callable
        self._keep: list[np.ndarray] = []                 # buffers whose addresses ops hold
        self._addrs: dict[int, int] = {}                  # by id: .ctypes.data costs ~1 us an array
        self.op_ns: np.ndarray | None = None              # time_ops(): nanoseconds of each op so far

    def op(self, name: str, *args, where: str = "") -> None:
        """One of the library's ops (CODES; program.h names the function each calls) with these
        arguments in that function's order: arrays as their addresses, None as a null pointer."""
        if name not in CODES:
            raise ValueError(f"unknown op {name!r}: the library runs {sorted(CODES)}")
        if len(args) > WORDS - 1:
            raise ValueError(f"op {name} takes at most {WORDS - 1} arguments, got {len(args)}")
        args = tuple(self._addr(a) if isinstance(a, np.ndarray) else (0 if a is None else a) for a in args)
        if self._steps and not callable(self._steps[-1]):
            first, n = self._steps[-1]
            self._steps[-1] = (first, n + 1)
        else:
            self._steps.append((len(self._ops), 1))
        self._ops.append((name, args, where))

    def _addr(self, a: np.ndarray) -> int:
        """a's address, looked up once per array (the arrays outlive the build: ids stay theirs)."""
        got = self._addrs.get(id(a))
        if got is None:
            got = self._addrs[id(a)] = a.ctypes.data
            self._keep.append(a)
        return got

    def py(self, fn: Callable[[], object]) -> None:
        """A Python step between the C ops around it."""
        self._steps.append(fn)

    def matmul(self, x: np.ndarray, w, out: np.ndarray, fallback: Callable[[], object], where: str = "") -> None:
        """x . w -> out: lb_qmatmul for a QMatrix, each part and its columns for a QRows, else the
        Python `fallback` (a float32 product by BLAS)."""
        if isinstance(w, QMatrix):
            self.op("qmatmul", *qmatmul_args(x, w, out), where=where)
        elif isinstance(w, QRows):
            a = 0
            for p in w.parts:                           # each part into a buffer, then into its columns
                buf = np.empty((x.shape[0], p.rows), np.float32)
                self._keep.append(buf)
                self.op("qmatmul", *qmatmul_args(x, p, buf), where=where)
                self.op("copy_cols", buf, x.shape[0], p.rows, out[:, a:].ctypes.data, out.shape[1], where=where)
                a += p.rows
        else:
            self.py(fallback)

    def finish(self) -> "Program":
        """Lays the ops out as lb_run_ops reads them (16 words each, floats as a double's bits)."""
        words = np.zeros((len(self._ops), WORDS), np.int64)
        floats = words.view(np.float64)
        for i, (name, args, _) in enumerate(self._ops):
            words[i, 0] = CODES[name]
            for j, a in enumerate(args, start=1):
                if j in FLOATS.get(name, ()):
                    floats[i, j] = float(a)
                else:
                    words[i, j] = int(a)
        base, self._failed = self._addr(words), ctypes.c_int64(0)
        self._calls = [step if callable(step) else (base + step[0] * WORDS * 8, step[1], step[0])
                       for step in self._steps]
        return self

    def __call__(self) -> None:
        if self.op_ns is not None:
            return self._timed()
        run, failed = self.lib.lb_run_ops, ctypes.byref(self._failed)
        for step in self._calls:
            if callable(step):
                step()
                continue
            at, n, first = step
            rc = run(at, n, failed)
            if rc:
                self._raise(first + self._failed.value, rc)

    def time_ops(self) -> np.ndarray:
        """From now on every run adds each C op's nanoseconds to the returned array (one an op, in
        order): the ops timed in place, between the others (bench/decode_profile.py)."""
        self.op_ns = np.zeros(len(self._ops), np.int64)
        return self.op_ns

    def _timed(self) -> None:
        run, failed, ns = self.lib.lb_run_ops_timed, ctypes.byref(self._failed), self.op_ns.ctypes.data
        for step in self._calls:
            if callable(step):
                step()
                continue
            at, n, first = step
            rc = run(at, n, failed, ns + first * 8)
            if rc:
                self._raise(first + self._failed.value, rc)

    def only(self, *names: str) -> "Program":
        """A Program of this one's ops named `names` alone, on the same buffers (to time a kind of op:
        bench/decode_profile.py); its Python steps are left out."""
        part = Program(self.lib)
        part._keep = self._keep
        for name, args, where in self._ops:
            if name in names:
                part.op(name, *args, where=where)
        return part.finish()

    def calls_into_c(self) -> int:
        """lb_run_ops calls a run makes (its stretches of C ops)."""
        return sum(1 for step in self._calls if not callable(step))

    def python_steps(self) -> int:
        """Python steps a run makes between its stretches."""
        return sum(1 for step in self._calls if callable(step))

    def names(self) -> list[str]:
        """The names of the ops, in order."""
        return [name for name, _, _ in self._ops]

    def _raise(self, i: int, rc: int):
        name, _, where = self._ops[i]
        if NO_MEMORY.get(name) == rc:
            raise MemoryError(f"native {name} could not allocate its buffers ({where})")
        raise ValueError(f"native {name} of {where} refused its arguments (code {rc})")
