"""A userspace Ethernet bridge that delays every frame: netem's `delay` where the kernel has no
netem (`tc qdisc ... netem` answers "Specified qdisc kind is unknown").

Each host's link is a tap device this process holds open (created here, then moved into the
host's namespace by `Network`); a frame read from one tap is written, `--delay-ms` later, to the
tap that owns its destination MAC (learnt from the frames seen), or to every other tap when the
destination is broadcast, multicast (mDNS) or not yet known. So every frame between two hosts
is late by the delay once: a round trip between two hosts takes twice the delay more.

    python3 -m tests.cluster.delay_bridge --delay-ms 5
    stdin:  add IFNAME      -> stdout: "ok IFNAME" once the tap exists (or "error ...")
            (end of input)  -> the bridge stops; its taps vanish with it
"""

from __future__ import annotations

import argparse
import collections
import fcntl
import os
import select
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TAP, IFF_NO_PI = 0x0002, 0x1000
FRAME_MAX = 65536 + 64


def open_tap(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
    except OSError:
        os.close(fd)
        raise
    return fd


class Bridge:
    """Learning bridge over tap fds; frames wait in one queue (one delay keeps arrival order)."""

    def __init__(self, delay_s: float):
        self.delay_s = delay_s
        self.ports: list[int] = []
        self.where: dict[bytes, int] = {}             # MAC -> the port it was last seen on
        self.queue: collections.deque = collections.deque()   # (due, from_port, frame)
        self.poll = select.epoll()

    def add(self, fd: int) -> None:
        self.ports.append(fd)
        self.poll.register(fd, select.EPOLLIN)

    def read(self, fd: int, now: float) -> None:
        for _ in range(256):           # what is there now; the rest after the next wait
            try:
                frame = os.read(fd, FRAME_MAX)
            except BlockingIOError:
                return
            except OSError:            # the tap's namespace was deleted: the port is gone
                self.drop(fd)
                return
            if len(frame) >= 14:
                self.where[frame[6:12]] = fd
                self.queue.append((now + self.delay_s, fd, frame))

    def drop(self, fd: int) -> None:
        self.poll.unregister(fd)
        self.ports.remove(fd)
        self.where = {mac: port for mac, port in self.where.items() if port != fd}
        os.close(fd)

    def send_due(self, now: float) -> None:
        while self.queue and self.queue[0][0] <= now:
            _, src, frame = self.queue.popleft()
            dst = frame[:6]
            out = self.where.get(dst) if not dst[0] & 1 else None
            for fd in ([out] if out is not None else self.ports):
                if fd != src and fd in self.ports:
                    try:
                        os.write(fd, frame)
                    except OSError:    # the tap's host is gone, or its queue is full: a lost frame
                        pass

    def wait_s(self, now: float) -> float:
        return max(0.0, self.queue[0][0] - now) if self.queue else 1.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delay-ms", type=float, required=True)
    args = ap.parse_args()
    bridge = Bridge(args.delay_ms / 1000)
    stdin = sys.stdin.fileno()
    os.set_blocking(stdin, False)
    bridge.poll.register(stdin, select.EPOLLIN)
    pending = b""
    while True:
        now = time.monotonic()
        for fd, _ in bridge.poll.poll(bridge.wait_s(now)):
            if fd != stdin:
                bridge.read(fd, time.monotonic())
                continue
            data = os.read(stdin, 4096)
            if not data:
                return 0
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                cmd, _, name = line.decode().strip().partition(" ")
                if cmd == "add":
                    try:
                        bridge.add(open_tap(name))
                        print(f"ok {name}", flush=True)
                    except OSError as e:
                        print(f"error {name}: {e}", flush=True)
        bridge.send_due(time.monotonic())


if __name__ == "__main__":
    sys.exit(main())
