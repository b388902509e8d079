#!/usr/bin/env python3
"""Wire benchmark: activation codec throughput, and round-trip latency over ZeroMQ on loopback.

    python3 bench/wire.py           # about 30 s
    python3 bench/wire.py --curve   # only what CURVE adds per message

Activations are the synthetic hidden states the codecs are tuned and tested on
(tests/wire/activations.py: rows of 576, gaussian channels plus a few outliers to ~300).
Throughput is GB/s of float32 input bytes through the whole envelope (wire.encode of an Echo
message; wire.decode plus .array()). Latency is a DEALER -> ROUTER -> DEALER echo between two
processes on tcp://127.0.0.1, with wire encode and decode on both sides; then the same echo with
ZeroMQ CURVE on (the cluster key of bus/curve.py) beside a plain one, in turns, to show what
encryption adds per message.
"""

import multiprocessing as mp
import os
import pathlib
import sys
import time
import timeit

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ROOT = pathlib.Path(__file__).resolve().parent.parent
# This file is called wire.py: drop its own folder from the path so `import wire` is the package.
sys.path[:] = [p for p in sys.path if pathlib.Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import zmq  # noqa: E402

import wire  # noqa: E402
from tests.wire.activations import activations  # noqa: E402
from wire.codecs import relative_error  # noqa: E402
from wire.messages.bus import Echo, EchoReply  # noqa: E402

CODECS = ("fp32", "fp16", "int8")
BATCHES = ((64, 576), (4096, 576))
ROUND_TRIPS = 300
WARMUP = 30


def seconds_per_call(fn) -> float:
    """Best of 5 timing runs of about 0.1 s each (the machine is shared: best is the signal)."""
    timer = timeit.Timer(fn)
    number, took = timer.autorange()
    number = max(1, int(number * 0.1 / max(took, 1e-9)))
    return min(timer.repeat(repeat=5, number=number)) / number


def echo_frames(x: np.ndarray, codec: str, mid: int = 0) -> list:
    return wire.encode(wire.Message(Echo(payload=wire.Tensor(x, codec)), id=mid, sender="bench"))


def codec_table() -> None:
    print("codec throughput (whole envelope; GB/s of float32 input; best of 5)")
    print(f"  {'batch':>10}  {'codec':5}  {'wire bytes':>10}  {'vs fp32':>7}  {'rel.err':>8}"
          f"  {'encode GB/s':>11} {'(us)':>8}  {'decode GB/s':>11} {'(us)':>8}")
    for rows, d in BATCHES:
        x = activations(rows, d)
        fp32_bytes = None
        for codec in CODECS:
            frames = [bytes(f) for f in echo_frames(x, codec)]
            t = wire.decode(frames).body.payload
            y = t.array()
            size = sum(len(f) for f in frames[1:])
            fp32_bytes = fp32_bytes or size
            enc = seconds_per_call(lambda: echo_frames(x, codec))
            dec = seconds_per_call(lambda: wire.decode(frames).body.payload.array())
            note = " (a view)" if codec == "fp32" else ""
            print(f"  {f'{rows}x{d}':>10}  {codec:5}  {size:>10}  {size / fp32_bytes:>7.3f}"
                  f"  {relative_error(x, y):>8.2e}  {x.nbytes / enc / 1e9:>11.2f} {enc * 1e6:>8.1f}"
                  f"  {x.nbytes / dec / 1e9:>11.2f} {dec * 1e6:>8.1f}{note}")
            if codec == "int8":
                print(f"  {'':>10}  {'':5}  int8 scales: {t.meta} "
                      f"({size / x.size:.3f} bytes a value)")


# -------------------------------------------------------------------------------- latency


def echo_server(port_out, key=None) -> None:
    """ROUTER: a frame list starting with an empty frame is echoed as is (the zmq-only
    baseline); anything else is decoded (tensor included) and answered with an EchoReply that
    forwards the received tensor's frames. With `key`, a CURVE server of that cluster key."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    if key is not None:
        from bus.curve import secure
        secure(sock, key)
    port_out.send(sock.bind_to_random_port("tcp://127.0.0.1"))
    while True:
        ident, *frames = sock.recv_multipart(copy=False)
        if len(frames[0]) == 0:
            sock.send_multipart([ident] + frames, copy=False)
            continue
        msg = wire.decode(frames)
        msg.body.payload.array()
        reply = msg.reply(EchoReply(payload=msg.body.payload), sender="echo", epoch=1)
        sock.send_multipart([ident] + wire.encode(reply), copy=False)


def percentiles(ns: list[int]) -> tuple[float, float]:
    a = np.array(ns[WARMUP:], np.float64) / 1e3
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


def round_trips(sock, x: np.ndarray, codec: str | None) -> tuple[float, float]:
    times = []
    for i in range(WARMUP + ROUND_TRIPS):
        t0 = time.perf_counter_ns()
        if codec is None:  # zmq only: the same bytes, no envelope
            sock.send_multipart([b"", x], copy=False)
            sock.recv_multipart(copy=False)
        else:
            sock.send_multipart(echo_frames(x, codec, i), copy=False)
            back = wire.decode(sock.recv_multipart(copy=False))
            assert back.id == i
            back.body.payload.array()
        times.append(time.perf_counter_ns() - t0)
    return percentiles(times)


def latency_table() -> None:
    ctx_mp = mp.get_context("fork")
    port_in, port_out = ctx_mp.Pipe(duplex=False)
    server = ctx_mp.Process(target=echo_server, args=(port_out,), daemon=True)
    server.start()
    port = port_in.recv()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 10_000)
    sock.connect(f"tcp://127.0.0.1:{port}")
    try:
        print(f"\nround trip DEALER -> ROUTER echo -> DEALER on tcp://127.0.0.1, two processes, "
              f"{ROUND_TRIPS} round trips after {WARMUP} warm-up")
        print(f"  {'message':>26}  {'codec':8}  {'payload bytes':>13}  {'p50 us':>8}  {'p99 us':>8}")
        for label, x in (("576 floats (one token)", activations(1)),
                         ("1 MB (455x576 floats)", activations(455))):
            for codec in (None,) + CODECS:
                p50, p99 = round_trips(sock, x, codec)
                size = x.nbytes if codec is None else sum(
                    len(f) for f in echo_frames(x, codec)[1:])
                print(f"  {label:>26}  {codec or 'zmq only':8}  {size:>13}  {p50:>8.0f}  {p99:>8.0f}")
    finally:
        sock.close()
        ctx.term()
        server.terminate()
        server.join()


def start_echo(key=None):
    """An echo server process and a DEALER connected to it (a CURVE client with `key`)."""
    ctx_mp = mp.get_context("fork")
    port_in, port_out = ctx_mp.Pipe(duplex=False)
    server = ctx_mp.Process(target=echo_server, args=(port_out, key), daemon=True)
    server.start()
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 10_000)
    if key is not None:
        from bus.curve import secure
        secure(sock, key)
    sock.connect(f"tcp://127.0.0.1:{port_in.recv()}")
    return server, sock


def curve_table(rounds: int = 3) -> None:
    from bus.curve import new_key
    if not zmq.has("curve"):
        print("\n(no CURVE in this libzmq: the CURVE table is skipped)")
        return
    servers = {name: start_echo(key) for name, key in (("plain", None), ("curve", new_key()))}
    try:
        print(f"\nthe same echo, plain and with CURVE, in turns ({rounds} rounds, p50 of each "
              f"round, median of the rounds)")
        print(f"  {'message':>26}  {'codec':8}  {'plain us':>8}  {'curve us':>8}  {'curve/plain':>11}")
        for label, x in (("576 floats (one token)", activations(1)),
                         ("1 MB (455x576 floats)", activations(455)),
                         ("9.4 MB (4096x576 floats)", activations(4096))):
            for codec in ("fp32", "fp16"):
                p50 = {name: [] for name in servers}
                for _ in range(rounds):
                    for name, (_, sock) in servers.items():
                        p50[name].append(round_trips(sock, x, codec)[0])
                med = {name: float(np.median(v)) for name, v in p50.items()}
                print(f"  {label:>26}  {codec:8}  {med['plain']:>8.0f}  {med['curve']:>8.0f}  "
                      f"{med['curve'] / med['plain']:>11.2f}")
    finally:
        for server, sock in servers.values():
            sock.close()
            server.terminate()
            server.join()


if __name__ == "__main__":
    print(f"numpy {np.__version__}, pyzmq {zmq.__version__}, libzmq {zmq.zmq_version()}, "
          f"{os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}\n")
    t0 = time.perf_counter()
    if "--curve" not in sys.argv:       # --curve: only the CURVE table
        codec_table()
        latency_table()
    curve_table()
    print(f"\n({time.perf_counter() - t0:.0f} s)")
