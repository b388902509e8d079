"""llmbus up's fixed ports lie below the kernel's ephemeral range, where no outgoing connection
(nor a client's self-connect to a dead service's port) can take them while a child is down, and
below where port-0 binds land; a process hands out none twice."""

import socket

from services.health import processes as children
from services.health.processes import ephemeral_range, free_port


def test_free_ports_lie_below_the_ephemeral_range_and_can_be_bound(monkeypatch):
    monkeypatch.setattr(children, "ephemeral_range", lambda: (32768, 60999))   # Linux's default
    top = min(32768, children.RANDOM_PORTS[0])
    ports = {free_port() for _ in range(50)}
    assert len(ports) == 50          # none handed out twice: a stack's ports are drawn before any is bound
    for port in ports:
        assert children.LOWEST_PORT <= port < top
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports.pop()))


def test_a_port_in_use_is_not_given(monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        monkeypatch.setattr(children, "LOWEST_PORT", taken)
        monkeypatch.setattr(children, "ephemeral_range", lambda: (taken + 1000, 65535))
        monkeypatch.setattr(children, "RANDOM_PORTS", (taken + 1000, 65535))
        monkeypatch.setattr(children, "_cursor", 0)                 # the search starts at the held port
        got = [free_port() for _ in range(1200)]                    # and goes round the span
        # Ports above the held one may be held by other processes too (they lie in the kernel's
        # ephemeral range here): the walk starts past it, and comes round again without it.
        assert taken not in got and taken < got[0] < taken + 1000
        assert len(set(got)) < len(got)


def test_with_no_room_below_the_range_any_free_port_is_given(tmp_path, monkeypatch):
    wide = tmp_path / "range"
    wide.write_text("1024\t65535\n")
    monkeypatch.setattr(children, "EPHEMERAL_RANGE", wide)
    assert ephemeral_range() == (1024, 65535)
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
