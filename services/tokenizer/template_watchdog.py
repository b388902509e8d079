"""A watchdog thread that stops a chat template running past its time: it looks at each
rendering thread's CPU time (and the wall clock) every TICK_S while any renders, and raises
OverTime into a thread past its limit. The rendering thread pays nothing per template line;
a render pays a lock and two clock reads.

OverTime is raised asynchronously (CPython's PyThreadState_SetAsyncExc), at the thread's next
bytecode. It is a BaseException, so no `except Exception` on the template's path catches it.
A watch fires once, and `release` takes back an exception not yet raised: after it, none is.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from dataclasses import dataclass

TICK_S = 0.005               # between two looks at the clocks while a template renders


class OverTime(BaseException):
    """Raised by the watchdog into a thread whose template ran past its limit."""


@dataclass(eq=False)
class Watch:
    thread: int              # threading.get_ident() of the rendering thread
    clock: int | None        # its CPU-time clock (None: no per-thread clocks here: wall time)
    cpu_until: float         # on that clock
    wall_until: float        # on time.monotonic()
    fired: bool = False


def _cpu_clock(thread: int) -> int | None:
    try:
        return time.pthread_getcpuclockid(thread)
    except (AttributeError, OSError):
        return None


def _cpu_now(clock: int | None) -> float:
    return time.monotonic() if clock is None else time.clock_gettime(clock)


def _raise_in(thread: int, exc: type[BaseException] | None) -> None:
    """Raise `exc` in `thread` at its next bytecode; None takes back one not raised yet."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread),
                                               None if exc is None else ctypes.py_object(exc))


class Watchdog:
    # A plain lock (its `with` is C: an OverTime landing in a `with` block still releases it),
    # never a Condition, whose Python __enter__ an OverTime could leave holding its lock.
    def __init__(self):
        self._lock = threading.Lock()
        self._watches: set[Watch] = set()
        self._busy = threading.Event()      # some thread renders: the watchdog looks
        self._thread: threading.Thread | None = None

    def watch(self, cpu_s: float, wall_s: float) -> Watch:
        """Watch this thread: OverTime past `cpu_s` of its CPU time or `wall_s` seconds."""
        thread = threading.get_ident()
        clock = _cpu_clock(thread)
        w = Watch(thread, clock, _cpu_now(clock) + cpu_s, time.monotonic() + wall_s)
        with self._lock:
            self._watches.add(w)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="template-watchdog",
                                                daemon=True)
                self._thread.start()
        self._busy.set()
        return w

    def release(self, w: Watch) -> None:
        """The render is over: no OverTime for it from now on (one not raised yet is taken
        back). May itself be where a late OverTime lands."""
        with self._lock:
            self._watches.discard(w)
            if w.fired:
                _raise_in(w.thread, None)

    def _run(self) -> None:
        while True:
            self._busy.wait()
            with self._lock:
                self._look()
                if not self._watches:
                    self._busy.clear()    # (a watch added after this sets it again)
            time.sleep(TICK_S)

    def _look(self) -> None:
        now = time.monotonic()
        for w in list(self._watches):
            try:
                over = _cpu_now(w.clock) > w.cpu_until or now > w.wall_until
            except OSError:              # its thread is gone
                self._watches.discard(w)
                continue
            if over:
                self._watches.discard(w)
                w.fired = True
                _raise_in(w.thread, OverTime)


_WATCHDOG = Watchdog()


def watchdog() -> Watchdog:
    return _WATCHDOG


def _after_fork() -> None:
    # A forked child has no watchdog thread (nor the renders it watched): a new one.
    global _WATCHDOG
    _WATCHDOG = Watchdog()


os.register_at_fork(after_in_child=_after_fork)
