"""llama.cpp's RPC on namespace hosts (tests/cluster/hosts.py): `rpc-server` on every host but the
first, `llama-server` on the first, computing its own layers on its CPU and sending the rest to
the RPC servers (`--rpc`), as llama.cpp's README shows it.

llama.cpp keeps the token embeddings on the CPU of llama-server's host always, and the output
head there too unless every layer is offloaded; its repeating layers [i_gpu_start, n) go to the
RPC devices in the proportions of --tensor-split, cut over n - i_gpu_start + 1 slots (the head's
slot counts though it stays): `layout` picks the cut that balances the hosts' bytes.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from services.modelstore.footprint import Footprint
from tests.cluster.hosts import Hosts

RPC_PORT = 50052
HTTP_PORT = 8090


@dataclass(frozen=True)
class Layout:
    ngl: int                                  # llama-server's --n-gpu-layers
    tensor_split: tuple[float, ...]           # --tensor-split, one per RPC server
    ranges: tuple[tuple[int, int], ...]       # layers of each host, llama-server's first
    bytes: tuple[int, ...]                    # weights each host holds


def host_bytes(fp: Footprint, ranges) -> tuple[int, ...]:
    first = sum(fp.layer_bytes[ranges[0][0]:ranges[0][1]]) + fp.first_bytes + fp.last_bytes
    return (first, *(sum(fp.layer_bytes[a:b]) for a, b in ranges[1:]))


def layout(fp: Footprint, n_hosts: int) -> Layout:
    """The -ngl and --tensor-split that give each of n_hosts contiguous layers with the largest
    host's bytes least, then the next largest (llama-server's host holds the embeddings and
    the head besides). The search tries every cut: enough for the few hosts a bench has."""
    n = fp.n_layers
    if n_hosts == 1:
        return Layout(0, (), ((0, n),), host_bytes(fp, ((0, n),)))
    best = None
    for cuts in _cuts(n, n_hosts):
        ranges = tuple(zip((0, *cuts), (*cuts, n)))
        b = host_bytes(fp, ranges)
        if best is None or sorted(b, reverse=True) < sorted(best[1], reverse=True):
            best = (ranges, b)
    ranges, b = best
    start = ranges[1][0]                      # i_gpu_start = n + 1 - ngl
    act = n + 1 - start                       # the head's slot counts, held on the CPU all the same
    # Each cut half a slot early: llama.cpp compares floats, and a cut exactly on a slot's
    # boundary would leave it to rounding which device takes that layer.
    bounds = [hi - start - 0.5 for _, hi in ranges[1:-1]] + [act]
    split = tuple(round(x - y, 3) for x, y in zip(bounds, [0.0, *bounds[:-1]]))
    return Layout(act, split, ranges, b)


def _cuts(n: int, k: int):
    """Every way to cut n layers into k non-empty contiguous ranges (their k-1 inner ends)."""
    if k == 1:
        yield ()
        return
    for first in range(1, n - k + 2):
        for rest in _cuts(n - first, k - 1):
            yield (first, *(first + r for r in rest))


def check_assignment(fp: Footprint, lay: Layout) -> list[int]:
    """The RPC device llama.cpp's rule (llama-model.cpp, load_tensors) gives each layer (-1: the
    CPU), to check a layout against llama.cpp's own arithmetic."""
    n = fp.n_layers
    start, act = max(n + 1 - lay.ngl, 0), min(lay.ngl, n + 1)
    total = sum(lay.tensor_split)
    splits = [sum(lay.tensor_split[:i + 1]) / total for i in range(len(lay.tensor_split))]
    out = []
    for il in range(n):
        if il < start:
            out.append(-1)
        else:
            f = (il - start) / act
            out.append(next(i for i, s in enumerate(splits) if s > f))
    return out


@dataclass
class LlamaCppRpc:
    hosts: Hosts
    names: list[str]
    lay: Layout
    started: float = 0.0

    @property
    def base(self) -> str:
        return f"http://{self.hosts.addr[self.names[0]]}:{HTTP_PORT}"


def start(hosts: Hosts, names: list[str], model: Path, bin_dir: Path, fp: Footprint, *,
          threads: int, parallel: int, ctx: int, cache: bool = True) -> LlamaCppRpc:
    """rpc-server on names[1:], then llama-server on names[0] (once the RPC ports answer)."""
    lay = layout(fp, len(names))
    run = LlamaCppRpc(hosts, names, lay, time.monotonic())
    for h in names[1:]:
        argv = [str(bin_dir / "ggml-rpc-server"), "-H", hosts.addr[h], "-p", str(RPC_PORT), "-t", str(threads)]
        hosts.start(h, f"rpc-{h}", argv + (["-c"] if cache else []),
                    env={"LLAMA_CACHE": str(hosts.cache(h) / "llama.cpp")})
    server = [str(bin_dir / "llama-server"), "-m", str(model), "--host", hosts.addr[names[0]],
              "--port", str(HTTP_PORT), "-t", str(threads), "-tb", str(threads), "-c", str(ctx),
              "-np", str(parallel), "--fit", "off", "--cache-ram", "0", "--no-webui"]
    if len(names) > 1:
        server += ["--rpc", ",".join(f"{hosts.addr[h]}:{RPC_PORT}" for h in names[1:]),
                   "-ngl", str(lay.ngl), "-ts", ",".join(map(str, lay.tensor_split))]
    else:
        server += ["-ngl", "0"]
    _wait_ports(hosts, names[0], [(hosts.addr[h], RPC_PORT) for h in names[1:]])
    hosts.start(names[0], f"llama-server-{names[0]}", server)
    return run


def _wait_ports(hosts: Hosts, host: str, ports: list[tuple[str, int]], timeout: float = 60.0) -> None:
    """Return once every (address, port) accepts a connection from `host`."""
    probe = ("import socket, sys, time\n"
             "for a in sys.argv[1:]:\n"
             "    h, p = a.rsplit(':', 1)\n"
             "    for _ in range(600):\n"
             "        try:\n"
             "            socket.create_connection((h, int(p)), 1).close(); break\n"
             "        except OSError: time.sleep(0.1)\n")
    if ports:
        subprocess.run(hosts.argv(host, [sys.executable, "-c", probe, *(f"{h}:{p}" for h, p in ports)]),
                       check=True, timeout=timeout)
