"""Where the GPU path's arrays live and its kernels run: a CUDA device through cupy, or numpy
standing in for it, behind one interface, so that every line of host code (buffers, uploads,
launches, graph capture and replay) runs in CI as it runs on a GPU.

    zeros / to_device   device arrays, allocated when a model loads and reused every step
    constant            one that never changes once there (weights)
    upload / download   the host copies into and out of them
    (none of these, nor synchronize, while a graph is captured: CUDA refuses the copies and the
    waits, and memory allocated inside a capture may be reused by the time the graph replays)
    launch              a kernel of kernels.KERNELS, its arguments checked against its declaration
    matmul_into         a cuBLAS product (eager prompt chunks only: never inside a graph)
    capture             a graph of the launches made inside the block, replayed later
    activate / follow   the device's own stream made current / made to wait for the caller's

NumpyDevice records a capture's launches without running them and runs them again on replay (recorded.py), with
the buffers as they are then, which is what a CUDA graph does: a step that read something on the
host while captured gives wrong results on replay here too, and an upload inside a capture fails
on both devices alike. Like a CUDA graph, a recording holds the addresses of the memory it reads,
not the memory: a replay after an array it reads was freed fails here (on a GPU it would read
whatever took that memory).
"""

from __future__ import annotations

import contextlib
from typing import Protocol

import numpy as np

from kernels.gpu.kernels import POINTERS, BadLaunch, Kernel, bind
from kernels.gpu.recorded import Address, CaptureError, RecordedGraph
from kernels.gpu.sources import source_text
from kernels.xp import ArrayModuleUnavailable, get_xp


class Graph(Protocol):
    def replay(self) -> None: ...


class Device(Protocol):
    name: str
    xp: object
    capturing: bool

    def zeros(self, shape, dtype): ...
    def to_device(self, host: np.ndarray): ...
    def constant(self, host: np.ndarray): ...
    def upload(self, dst, host: np.ndarray) -> None: ...
    def download(self, src) -> np.ndarray: ...
    def launch(self, kernel: Kernel, *args) -> None: ...
    def matmul_into(self, x, w, out, col0: int) -> None: ...
    def capture(self): ...
    def activate(self): ...
    def follow(self) -> None: ...
    def synchronize(self) -> None: ...


class _Base:
    capturing = False

    def _no_capture(self, what: str) -> None:
        if self.capturing:
            raise CaptureError(f"{what} inside a graph capture: a step's inputs go into its buffers "
                               "before the graph is replayed")

    def zeros(self, shape, dtype):
        self._no_capture("an allocation")
        return self._zeros(shape, dtype)

    def to_device(self, host: np.ndarray):
        self._no_capture("an allocation")
        return self._to_device(host)

    def constant(self, host: np.ndarray):
        self._no_capture("an allocation")
        return self._constant(host)

    def synchronize(self) -> None:
        self._no_capture("a wait for the device")
        self._synchronize()

    def upload(self, dst, host: np.ndarray) -> None:
        """dst[...] = host, shapes equal (dst a contiguous device array or view)."""
        self._no_capture("a host-to-device copy")
        host = np.ascontiguousarray(host, dtype=dst.dtype)
        if host.shape != dst.shape:
            raise ValueError(f"upload of {host.shape} into a buffer of {dst.shape}")
        self._set(dst, host)

    def download(self, src) -> np.ndarray:
        self._no_capture("a device-to-host copy")
        return self._get(src)

    def matmul_into(self, x, w, out, col0: int) -> None:
        """out[:, col0:col0 + w.shape[0]] = x (T, K) @ w (N, K).T, float32."""
        self._no_capture("an eager matrix product")
        out[:, col0:col0 + w.shape[0]] = self.xp.matmul(x, w.T)


class NumpyDevice(_Base):
    """numpy arrays for device buffers, each kernel's numpy reference for the kernel."""

    name = "numpy"
    xp = np

    def __init__(self):
        self._recording: list | None = None

    @property
    def capturing(self) -> bool:
        return self._recording is not None

    def _zeros(self, shape, dtype):
        return np.zeros(shape, dtype)

    def _to_device(self, host: np.ndarray):
        return np.array(host, copy=True, order="C")

    def _constant(self, host: np.ndarray):
        """A read-only copy: nothing can change it, so the references may keep what they derive from
        it (kernels.gpu.ref_quant keeps a weight's dequantized rows)."""
        a = self._to_device(host)
        a.flags.writeable = False
        return a

    def _set(self, dst, host) -> None:
        dst[...] = host

    def _get(self, src) -> np.ndarray:
        return np.array(src, copy=True)

    def launch(self, kernel: Kernel, *args) -> None:
        bind(kernel, args)
        if self._recording is not None:
            self._recording.append((kernel, tuple(Address.of(a) for a in args)))
        else:
            kernel.reference(*args)

    @contextlib.contextmanager
    def capture(self):
        if self.capturing:
            raise CaptureError("a capture inside a capture")
        graph = RecordedGraph()
        self._recording = graph.launches
        try:
            yield graph
        finally:
            self._recording = None

    def activate(self):
        return contextlib.nullcontext()

    def follow(self) -> None:
        pass

    def _synchronize(self) -> None:
        pass


class CupyDevice(_Base):
    """One CUDA device through cupy: kernels compiled from kernels/gpu/cuda by NVRTC at first use
    (cupy keeps the binaries in its on-disk cache), all work on one stream of this device's own,
    graphs captured on it. The stream does not wait for the default stream, nor it for this one (a
    capture here is not broken by another thread's work there): results handed out are finished
    (synchronize), and work that reads arrays another stream made first follows it (follow)."""

    name = "cuda"

    def __init__(self):
        self.xp = get_xp("cupy")          # ArrayModuleUnavailable without cupy or a device
        self.stream = self.xp.cuda.Stream(non_blocking=True)
        self._modules: dict[str, object] = {}
        self._functions: dict[str, object] = {}
        self._capturing = False

    @property
    def capturing(self) -> bool:
        return self._capturing

    def _zeros(self, shape, dtype):
        with self.stream:
            return self.xp.zeros(shape, dtype)

    def _to_device(self, host: np.ndarray):
        with self.stream:
            out = self.xp.asarray(np.ascontiguousarray(host))
        self.stream.synchronize()        # the host array may go away once this returns
        return out

    def _constant(self, host: np.ndarray):
        return self._to_device(host)

    def _set(self, dst, host) -> None:
        dst.set(host, stream=self.stream)

    def _get(self, src) -> np.ndarray:
        return src.get(stream=self.stream)

    def function(self, kernel: Kernel):
        """The compiled kernel (its source file compiled at the first call for any of its kernels)."""
        fn = self._functions.get(kernel.name)
        if fn is None:
            module = self._modules.get(kernel.source)
            if module is None:
                module = self.xp.RawModule(code=source_text(kernel.source), options=("--std=c++14",))
                self._modules[kernel.source] = module
            fn = self._functions[kernel.name] = module.get_function(kernel.name)
        return fn

    def launch(self, kernel: Kernel, *args) -> None:
        grid, block = bind(kernel, args)
        for (kind, name), a in zip(kernel.params, args):
            if kind in POINTERS and not isinstance(a, self.xp.ndarray):   # cupy would pass a size-1 numpy
                raise BadLaunch(f"{kernel.name}: {name} is a host array, not one on the device")  # array by value
        fn = self.function(kernel)
        conv = tuple(_scalar(t, a) for (t, _), a in zip(kernel.params, args))
        with self.stream:
            fn(grid, block, conv)

    def matmul_into(self, x, w, out, col0: int) -> None:
        with self.stream:
            super().matmul_into(x, w, out, col0)

    @contextlib.contextmanager
    def capture(self):
        if self._capturing:
            raise CaptureError("a capture inside a capture")
        graph = _CudaGraph(self.stream)
        with self.stream:
            self.stream.begin_capture()
            self._capturing = True
            try:
                yield graph
            except BaseException:
                self._capturing = False
                try:                       # end it (an invalidated capture raises here): the stream
                    self.stream.end_capture()     # is usable again, and the first error is the one told
                except Exception:  # noqa: BLE001 - the exception being raised says what went wrong
                    pass
                raise
            self._capturing = False
            graph.graph = self.stream.end_capture()

    def activate(self):
        """Make this device's stream the current one (cupy's own ops then run on it too)."""
        return self.stream

    def follow(self) -> None:
        """Make this device's stream wait for what the caller's current stream has queued so far."""
        current = self.xp.cuda.get_current_stream()
        if current.ptr != self.stream.ptr:
            self.stream.wait_event(current.record())

    def _synchronize(self) -> None:
        self.stream.synchronize()

    def memory(self) -> tuple[int, int]:
        """(free, total) bytes of the device."""
        free, total = self.xp.cuda.runtime.memGetInfo()
        return int(free), int(total)


class _CudaGraph:
    def __init__(self, stream):
        self.stream, self.graph = stream, None

    def replay(self) -> None:
        self.graph.launch(stream=self.stream)


def _scalar(kind: str, a):
    if kind == "i32":
        return np.int32(a)
    if kind == "f32":
        return np.float32(a)
    if kind == "f64":
        return np.float64(a)
    return a                                  # a device array: its pointer


def device(name: str) -> Device:
    """"cuda" (a GPU through cupy; ArrayModuleUnavailable naming why not) or "numpy" (the stand-in)."""
    if name == "cuda":
        return CupyDevice()
    if name == "numpy":
        return NumpyDevice()
    raise ValueError(f"unknown device {name!r}: 'cuda' or 'numpy'")


__all__ = ["ArrayModuleUnavailable", "CaptureError", "CupyDevice", "Device", "NumpyDevice", "device"]
