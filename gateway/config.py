"""The gateway's settings: one dataclass, checked when built."""

from __future__ import annotations

from dataclasses import dataclass

from bus.options import option

DEFAULT_HTTP = "127.0.0.1:8080"


@dataclass(frozen=True)
class GatewayConfig:
    host: str = "127.0.0.1"
    port: int = 8080                  # 0: any free port (tests)
    api_key: str | None = None        # None: no authentication
    max_body_bytes: int = option(4 << 20, "largest request body, bytes (larger ones are refused "
                                 "with 413 before being read)", flag="--max-body")
    read_timeout: float = option(30.0, "seconds a client has to send a request's headers and body")
    header_timeout: float = 10.0      # from a connection's first byte to its headers' end
    stream_idle_timeout: float = 300.0  # a stream that stays silent this long has failed
    allowed_hosts: tuple[str, ...] = option((), "a host name requests may be for, besides the "
                                            "bound address (and loopback names or, for a "
                                            "wildcard bind, this machine's names); repeatable, "
                                            "none by default; * for any", flag="--allowed-host", metavar="NAME")
    cors_origins: tuple[str, ...] = option((), "the origin of a web page of another site that "
                                           "may call the API (CORS, preflight included); "
                                           "repeatable, none by default", flag="--cors-origin", metavar="URL")
    max_connections: int = option(512, "HTTP connections open at once; past it a new one is "
                                  "answered 503 and closed")
    carry_s: float = option(60.0, "seconds a request whose scheduler (or tokenizer) was lost "
                            "waits for one that serves it again (its client sees a pause) "
                            "before it fails")

    def __post_init__(self):
        if not 0 <= self.port <= 65535:
            raise ValueError(f"--http port {self.port} is not within 0..65535")
        if self.max_body_bytes <= 0 or self.read_timeout <= 0 or self.header_timeout <= 0:
            raise ValueError("max_body_bytes, read_timeout and header_timeout must be > 0")
        if not self.carry_s >= 0:
            raise ValueError(f"carry_s {self.carry_s}: seconds, >= 0")
        if self.max_connections < 1:
            raise ValueError(f"max_connections {self.max_connections}: at least 1")
        for origin in self.cors_origins:
            if origin not in ("*", "null") and "://" not in origin:
                raise ValueError(f"--cors-origin {origin!r}: give an origin such as "
                                 f"https://chat.example.com")
        if self.api_key is not None and not self.api_key:
            raise ValueError("the API key is empty")


def parse_http(value: str) -> tuple[str, int]:
    """'HOST:PORT' (or ':PORT', or 'PORT') -> (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", value
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"--http {value!r}: give HOST:PORT, e.g. 127.0.0.1:8080") from None
    return host.strip("[]") or "127.0.0.1", number
