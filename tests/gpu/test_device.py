"""The device abstraction itself: what a graph captures and replays, what may not happen inside a
capture, and the launch checks every kernel call passes, the same on numpy and on a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.gpu import ops
from kernels.gpu.device import CaptureError, NumpyDevice, device
from kernels.gpu.kernels import KERNELS, BadLaunch

F32 = np.float32


def test_a_graph_runs_nothing_while_captured_and_reads_its_buffers_when_replayed(dev):
    h = dev.to_device(np.ones((2, 8), F32))
    delta = dev.to_device(np.full((2, 8), 2.0, F32))
    with dev.capture() as graph:
        ops.add_rows(dev, h, delta)
        ops.add_rows(dev, h, delta)
    np.testing.assert_array_equal(dev.download(h), 1.0)            # captured, not run
    graph.replay()
    np.testing.assert_array_equal(dev.download(h), 5.0)
    dev.upload(delta, np.full((2, 8), -1.0, F32))                  # new inputs, same buffers
    graph.replay()
    np.testing.assert_array_equal(dev.download(h), 3.0)


def test_a_replay_reading_a_buffer_freed_since_its_capture_fails_on_the_stand_in():
    # A CUDA graph holds addresses, not allocations: the stand-in's recording likewise holds its
    # arrays' memory weakly, so a graph outliving a buffer it reads fails in CI, not as garbage on a GPU.
    dev = NumpyDevice()
    h, delta = dev.to_device(np.ones((2, 8), F32)), dev.to_device(np.ones((2, 8), F32))
    with dev.capture() as graph:
        ops.add_rows(dev, h[:1], delta[1:])                       # views: the graph reads their owners
    graph.replay()
    np.testing.assert_array_equal(h, [[2.0] * 8, [1.0] * 8])
    del delta
    with pytest.raises(CaptureError, match="freed since its capture"):
        graph.replay()


def test_no_copy_and_no_eager_product_inside_a_capture(dev):
    a, out = dev.zeros((2, 4), F32), dev.zeros((2, 2), F32)
    with pytest.raises(CaptureError, match="host-to-device"):
        with dev.capture():
            dev.upload(a, np.ones((2, 4), F32))
    with pytest.raises(CaptureError, match="device-to-host"):
        with dev.capture():
            dev.download(a)
    with pytest.raises(CaptureError, match="product"):
        with dev.capture():
            dev.matmul_into(a, a, out, 0)
    assert not dev.capturing
    dev.upload(a, np.ones((2, 4), F32))                            # and after it, fine
    np.testing.assert_array_equal(dev.download(a), 1.0)


@pytest.mark.parametrize("what", ["zeros", "to_device", "constant", "synchronize"])
def test_no_allocation_and_no_wait_inside_a_capture(dev, what):
    # Memory a capture allocated may be another array's by the time the graph replays, and CUDA
    # refuses a wait on a capturing stream: the stand-in refuses both too, so CI finds them.
    calls = {"zeros": lambda: dev.zeros(4, F32), "to_device": lambda: dev.to_device(np.ones(4, F32)),
             "constant": lambda: dev.constant(np.ones(4, F32)), "synchronize": dev.synchronize}
    h, delta = dev.to_device(np.ones(4, F32)), dev.to_device(np.ones(4, F32))
    with pytest.raises(CaptureError, match="allocation|wait"):
        with dev.capture():
            ops.add_rows(dev, h, delta)
            calls[what]()
    assert not dev.capturing
    with dev.capture() as graph:                                    # the device captures again
        ops.add_rows(dev, h, delta)
    graph.replay()
    np.testing.assert_array_equal(dev.download(h), 2.0)


def test_launches_are_checked_against_the_declaration(dev):
    k = KERNELS["add_rows"]
    h = dev.zeros(16, F32)
    with pytest.raises(BadLaunch, match="float32"):
        dev.launch(k, dev.zeros(16, np.float16), h, 16)
    with pytest.raises(BadLaunch, match="contiguous"):
        dev.launch(k, dev.zeros((4, 8), F32)[:, :4], h, 16)
    with pytest.raises(BadLaunch, match="int32"):
        dev.launch(k, h, h, 2**31)
    with pytest.raises(BadLaunch, match="3 arguments"):
        dev.launch(k, h, h)
    with pytest.raises(BadLaunch, match="grid"):
        dev.launch(k, h, h, 0)                                    # an empty grid CUDA refuses
    with pytest.raises(BadLaunch, match="grid"):
        dev.launch(KERNELS["qmatmul_q8_0"], dev.zeros((1, 34), np.uint8), 1, 32, dev.zeros((70000 * 16, 32), F32),
                   32, 70000 * 16, dev.zeros((70000 * 16, 1), F32), 1, 0)   # grid.y past 65535


def test_the_one_row_products_activations_must_be_aligned_for_their_four_float_loads(dev):
    # qmatvec reads x as float4: a view starting one float into a buffer is a misaligned-address
    # fault on a GPU, refused before the launch on both devices. qmatmul reads x a float a lane.
    k = KERNELS["qmatvec_q8_0"]
    w, out, buf = dev.zeros((1, 34), np.uint8), dev.zeros((1, 1), F32), dev.zeros(32 + 4, F32)
    dev.launch(k, w, 1, 32, buf[4:4 + 32], out, 1, 0)                                 # 16 bytes in: fine
    with pytest.raises(BadLaunch, match="address"):
        dev.launch(k, w, 1, 32, buf[1:1 + 32], out, 1, 0)
    dev.launch(KERNELS["qmatmul_q8_0"], w, 1, 32, buf[1:1 + 32].reshape(1, 32), 32, 1, out, 1, 0)


@pytest.mark.parametrize("kind, rb, align", [("q4_1", 20, 4), ("q4_k", 144, 16)])
def test_blocks_read_in_words_must_start_aligned_for_them(dev, kind, rb, align):
    # quant.cuh reads Q4_1 blocks 4 bytes at a time and Q4_K's nibbles 16 at a time: a matrix one
    # byte into a buffer is refused before the launch, by each kernel that reads the blocks.
    cols = 32 if kind == "q4_1" else 256
    buf, x, out = dev.zeros(2 * rb + align, np.uint8), dev.zeros((1, cols), F32), dev.zeros((1, 2), F32)
    ids = dev.zeros(1, np.int32)
    dev.launch(KERNELS[f"qmatmul_{kind}"], buf[align:align + 2 * rb].reshape(2, rb), 2, cols, x, cols, 1, out, 2, 0)
    bad = buf[1:1 + 2 * rb].reshape(2, rb)
    with pytest.raises(BadLaunch, match="address"):
        dev.launch(KERNELS[f"qmatmul_{kind}"], bad, 2, cols, x, cols, 1, out, 2, 0)
    with pytest.raises(BadLaunch, match="address"):
        dev.launch(KERNELS[f"qmatvec_{kind}"], bad, 2, cols, x, out, 2, 0)
    with pytest.raises(BadLaunch, match="address"):
        dev.launch(KERNELS[f"dequant_{kind}"], bad, 2, cols, dev.zeros((2, cols), F32))
    with pytest.raises(BadLaunch, match="address"):
        dev.launch(KERNELS[f"embed_{kind}"], bad, cols, ids, 1, 1.0, x)


@pytest.mark.gpu
def test_a_host_array_is_refused_where_a_kernel_reads_the_device(cuda_device):
    # cupy would pass a one-element numpy array by value, where the kernel reads a pointer.
    h = cuda_device.zeros(1, F32)
    with pytest.raises(BadLaunch, match="host array"):
        cuda_device.launch(KERNELS["add_rows"], h, np.ones(1, F32), 1)


def test_the_upload_shape_must_be_the_buffers(dev):
    with pytest.raises(ValueError, match="upload"):
        dev.upload(dev.zeros(4, np.int32), np.arange(5, dtype=np.int32))


def test_constants_cannot_be_written_on_the_stand_in():
    c = NumpyDevice().constant(np.arange(3, dtype=F32))
    with pytest.raises(ValueError):
        c[0] = 1


def test_device_names():
    assert isinstance(device("numpy"), NumpyDevice)
    with pytest.raises(ValueError, match="tpu"):
        device("tpu")


def test_the_gpu_path_imports_no_cupy_until_a_cuda_device_is_made():
    # A CPU host has no cupy; and the fork server (services/cli/forkserver.py) imports these before it
    # forks shards, which must not inherit a CUDA context.
    import subprocess
    import sys
    code = ("import sys, services.shard.gpu_model, services.shard.service, kernels.gpu.device, "
            "kernels.gpu.sampling, services.shard.resident; sys.exit('cupy' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
