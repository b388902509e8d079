"""What `llmbus up` checks before it starts anything: that no stack of this machine already runs
with the same cluster or HTTP address, and that the fixed ports it was given are free. Each
refusal says which stack or port is in the way and what to do instead."""

from __future__ import annotations

import errno
import socket


def split_address(address: str) -> tuple[str, int]:
    """'HOST:PORT' (or an http:// URL) as (host, port); ValueError for anything else."""
    rest = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def port_in_use(host: str, port: int) -> bool:
    """Something listens on host:port here (a bind as the gateway's fails with EADDRINUSE)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return False      # an unknown host is the gateway's to report, with its own words
    for family, kind, proto, _, addr in infos:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as aiohttp binds
            try:
                s.bind(addr)
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    return True
    return False


def refusal(*, http: str, cluster: str | None, rpc_port: int, stacks: list[dict],
            in_use=port_in_use) -> str | None:
    """Why `llmbus up` must not start, or None. `stacks`: the stack files of this machine's
    running stacks (services.cli.stacks.running)."""
    where = split_address(http)
    for s in stacks:
        what = (f"an llmbus stack is already running here (cluster {s['cluster']}, pid "
                f"{s['pid']}, HTTP API at {s.get('http') or '?'})")
        if cluster is not None and s["cluster"] == cluster:
            return (f"{what} with cluster {cluster}: `llmbus down --cluster {cluster}` stops "
                    f"it, or give another --cluster")
        # By port alone: localhost, 127.0.0.1 and 0.0.0.0 are one place to the person asking.
        if where[1] and s.get("http") and split_address(s["http"])[1] == where[1]:
            return (f"{what} on {http}: talk to it (`llmbus chat`), stop it with `llmbus down`, "
                    f"or start another beside it with --http HOST:PORT")
    for flag, host, port in (("--http", where[0], where[1]), ("--port", "0.0.0.0", rpc_port)):
        if port and in_use(host, port):
            return (f"port {port} ({flag} {http if flag == '--http' else port}) is in use by "
                    f"another program on this machine: choose another with {flag}")
    return None
