"""Who may ask the gateway, by a request's headers alone (pure: no aiohttp here).

A web page of another site can make a browser send requests to a gateway on the user's own
machine: a "simple" POST (`text/plain`, a form) needs no CORS preflight, and DNS rebinding lets a
page read the answers too (its own name, resolved to 127.0.0.1). Browsers always say where a
request comes from (`Origin` on every cross-site request and every POST) and whom it is for
(`Host`), so:

- `Host` must name this gateway: the address it is bound to, a loopback name for a loopback
  bind, this machine's names and addresses for a wildcard bind, or a name given with
  `--allowed-host` (`*`: any, behind a proxy that checks it). An IP address cannot be rebound,
  so for a wildcard bind any address is one of ours.
- `Origin`, when sent, must be the gateway's own (a page it serves itself) or one given with
  `--cors-origin`, which also opens CORS (preflight included) for that page.
- A body must be declared JSON. curl's `-d` and Ollama's examples send
  `application/x-www-form-urlencoded` (or nothing): that is taken only from a client that is not
  a browser, i.e. one that sends no `Origin`.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

WILDCARD = frozenset({"", "0.0.0.0", "::"})
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
# What curl -d (and a client that sets none) sends: JSON all the same, from a non-browser.
NON_BROWSER_TYPES = frozenset({"", "application/x-www-form-urlencoded"})
PREFLIGHT_MAX_AGE_S = 600
ALLOWED_METHODS = "GET, POST, OPTIONS"
# Headers the official clients send (and a browser front end may): allowed in a preflight that
# does not list its own.
ALLOWED_HEADERS = ("Authorization, Content-Type, x-api-key, api-key, anthropic-version, "
                   "anthropic-beta, x-stainless-arch, x-stainless-lang, x-stainless-os, "
                   "x-stainless-package-version, x-stainless-runtime, "
                   "x-stainless-runtime-version, x-stainless-retry-count, x-stainless-timeout")
EXPOSED_HEADERS = "Retry-After"


def host_name(host: str) -> str:
    """The name or address of a `Host` header, without port, brackets or a final dot."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host[1:]
    name, sep, port = host.rpartition(":")
    if sep and port.isdigit() and ":" not in name:
        host = name
    return host.rstrip(".")


def _ip(text: str):
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def machine_names() -> frozenset[str]:
    """This machine's own names (a wildcard bind answers on them all)."""
    names = set(LOOPBACK_NAMES)
    for name in (socket.gethostname(), socket.getfqdn()):
        name = name.lower().rstrip(".")
        if name:
            names.add(name)
            names.add(name.split(".")[0] + ".local")     # its mDNS name
    return frozenset(names)


@dataclass(frozen=True)
class Sites:
    """The hosts and origins a gateway bound to `bind` answers."""
    bind: str
    names: frozenset[str]            # host names (lowercase) a request may be for
    cors_origins: frozenset[str]     # origins of other sites' pages that may ask
    any_host: bool = False
    any_origin: bool = False

    @classmethod
    def of(cls, bind: str, allowed_hosts=(), cors_origins=()) -> "Sites":
        bind = host_name(bind)
        names = {host_name(h) for h in allowed_hosts if h != "*"} | {bind}
        ip = _ip(bind)
        if bind in WILDCARD:
            names |= machine_names()
        elif ip is not None and ip.is_loopback:
            names |= LOOPBACK_NAMES
        origins = {o.strip().rstrip("/").lower() for o in cors_origins if o != "*"}
        return cls(bind, frozenset(names), frozenset(origins), "*" in allowed_hosts,
                   "*" in cors_origins)

    def host_refusal(self, host: str | None) -> str | None:
        """Why a request for `host` (its Host header) is refused; None: it is for us."""
        if host is None or self.any_host:
            return None      # no browser leaves Host out; a request without one is no rebinding
        name = host_name(host)
        if name in self.names:
            return None
        ip = _ip(name)
        if ip is not None:
            bound = _ip(self.bind)
            if self.bind in WILDCARD or ip == bound or (bound is not None and bound.is_loopback
                                                        and ip.is_loopback):
                return None
        return (f"this gateway does not answer for the host {name!r} (a web page's name "
                f"pointed at this machine?); run it with --allowed-host {name} to allow it")

    def origin_allowed(self, origin: str, host: str | None) -> bool:
        """Whether a page of `origin` may ask (the gateway's own origin, or one let in)."""
        origin = origin.strip().rstrip("/").lower()
        if host is not None and origin in (f"http://{host.lower()}", f"https://{host.lower()}"):
            return True
        return self.any_origin or origin in self.cors_origins

    def cors(self, origin: str) -> bool:
        """Whether answers to `origin` carry CORS headers (a page of another site let in)."""
        origin = origin.strip().rstrip("/").lower()
        return self.any_origin or origin in self.cors_origins


def body_refusal(content_type: str | None, origin: str | None) -> str | None:
    """Why a body declared as `content_type` is refused; None: it is read as JSON."""
    mime = (content_type or "").split(";")[0].strip().lower()
    if mime == "application/json" or mime.endswith("+json"):
        return None
    if mime in NON_BROWSER_TYPES and origin is None:
        return None
    return (f"the body is declared as {mime or 'nothing'!r}; send JSON with "
            f"`Content-Type: application/json`")


def preflight_headers(requested_headers: str | None) -> dict[str, str]:
    """The answer's headers to a CORS preflight of an allowed origin."""
    return {"Access-Control-Allow-Methods": ALLOWED_METHODS,
            "Access-Control-Allow-Headers": requested_headers or ALLOWED_HEADERS,
            "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE_S)}
