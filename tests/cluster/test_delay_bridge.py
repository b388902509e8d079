"""The delaying bridge: two hosts on it see each other's frames late by the delay each way,
every byte arrives intact, and multicast (what mDNS needs) crosses it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import require

from .netns import ROOT, Network, why_not

pytestmark = pytest.mark.slow

# One process per side, run in the hosts' namespaces: the client's multicast datagram comes
# back over TCP; then the server echoes what it reads: the client times lone-byte round trips,
# then sends 8 MiB and reads it back.
SERVER = """
import socket, struct, sys
addr = sys.argv[1]
m = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
m.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
m.bind(("", 5999))
m.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton("239.7.7.7") + socket.inet_aton(addr))
s = socket.socket()
s.bind((addr, 6000)); s.listen()
print("listening", flush=True)
c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
c.sendall(m.recv(100))
while data := c.recv(1 << 20):
    c.sendall(data)
"""
CLIENT = """
import hashlib, json, socket, sys, time
addr, me = sys.argv[1], sys.argv[2]
m = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
m.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(me))
c = socket.create_connection((addr, 6000), timeout=30)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
c.settimeout(0.2)
for _ in range(100):   # a new link may drop the first datagrams: say it until it is heard
    m.sendto(b"hello by multicast", ("239.7.7.7", 5999))
    try:
        heard = c.recv(100)
        break
    except TimeoutError:
        pass
c.settimeout(30)
rtts = []
for _ in range(10):
    t = time.perf_counter(); c.sendall(b"p"); c.recv(1); rtts.append(time.perf_counter() - t)
blob = bytes(range(256)) * (8 << 12)
back = bytearray()
c.sendall(blob)
while len(back) < len(blob):
    back += c.recv(1 << 20)
print(json.dumps({"heard": heard.decode(), "rtt_ms": sorted(rtts)[5] * 1e3, "min_rtt_ms": min(rtts) * 1e3,
                  "intact": hashlib.sha256(back).digest() == hashlib.sha256(blob).digest()}))
"""


@pytest.mark.parametrize("delay_ms", [0, 4])
def test_frames_between_hosts_are_late_by_the_delay_each_way(delay_ms):
    why = why_not()
    require(not why, f"the bridge test needs network namespaces: {why}")
    net = Network(delay_ms=delay_ms)
    server = None
    try:
        a, b = net.add("a"), net.add("b")
        server = subprocess.Popen(net.cmd("b", [sys.executable, "-c", SERVER, b]), cwd=ROOT,
                                  stdout=subprocess.PIPE, text=True)
        assert server.stdout.readline().strip() == "listening"
        out = subprocess.run(net.cmd("a", [sys.executable, "-c", CLIENT, b, a]), cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout)
        assert got["heard"] == "hello by multicast" and got["intact"], got
        # A round trip crosses the bridge twice: never faster than twice the delay.
        assert got["min_rtt_ms"] >= 2 * delay_ms, got
        sent, _ = net.link_bytes("a")
        assert sent >= 8 << 20
    finally:
        if server is not None:
            server.kill()
            server.wait()
        net.close()
