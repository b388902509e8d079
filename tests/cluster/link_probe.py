"""Measure a link between two namespace hosts: a multicast datagram crosses it, then lone-byte
TCP round trips and 8 MiB echoed back give the round trip and the rate.

`probe(net, a, b)` runs a server on host b and a client on host a (tests/cluster/netns.Network)
and returns {"heard", "rtt_s", "min_rtt_s", "bytes_per_s", "intact"}.
"""

from __future__ import annotations

import json
import subprocess
import sys

from .netns import ROOT, Network

# The client's multicast datagram comes back over TCP; then the server echoes what it reads.
SERVER = """
import socket, sys
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
import hashlib, json, socket, sys, threading, time
addr, me = sys.argv[1], sys.argv[2]
m = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
m.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(me))
c = socket.create_connection((addr, 6000), timeout=30)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
c.settimeout(0.2)
heard = b""
for _ in range(100):   # a new link may drop the first datagrams: say it until it is heard
    m.sendto(b"hello by multicast", ("239.7.7.7", 5999))
    try:
        heard = c.recv(100)
        break
    except TimeoutError:
        pass
c.settimeout(30)
rtts = []
for _ in range(20):
    t = time.perf_counter(); c.sendall(b"p"); c.recv(1); rtts.append(time.perf_counter() - t)
blob = bytes(range(256)) * (8 << 12)
back = bytearray()
t = time.perf_counter()
threading.Thread(target=c.sendall, args=(blob,), daemon=True).start()   # read the echo meanwhile
while len(back) < len(blob):
    back += c.recv(1 << 20)
seconds = time.perf_counter() - t
print(json.dumps({"heard": heard.decode(), "rtt_s": sorted(rtts)[10], "min_rtt_s": min(rtts),
                  "bytes_per_s": 2 * len(blob) / seconds,
                  "intact": hashlib.sha256(back).digest() == hashlib.sha256(blob).digest()}))
"""


def probe(net: Network, a: str, b: str) -> dict:
    server = subprocess.Popen(net.cmd(b, [sys.executable, "-c", SERVER, net.hosts[b]]), cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        if server.stdout.readline().strip() != "listening":
            raise RuntimeError(f"the probe's server on {b} did not start")
        out = subprocess.run(net.cmd(a, [sys.executable, "-c", CLIENT, net.hosts[b], net.hosts[a]]),
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"the probe from {a} to {b} failed: {out.stderr.strip()[-500:]}")
        return json.loads(out.stdout)
    finally:
        server.kill()
        server.wait()
