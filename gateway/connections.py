"""A cap on the gateway's HTTP connections: past it a new connection is answered 503 and closed
at once, so a flood of connections cannot use up the process's file descriptors (and with them
its bus sockets and log)."""

from __future__ import annotations

import asyncio

from aiohttp import web

REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
           b"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s")


def refusal(limit: int) -> bytes:
    body = (b'{"error": {"code": 503, "type": "unavailable", "param": null, "message": '
            b'"the gateway has %d connections open, its limit (--max-connections): try again '
            b'later"}}' % limit)
    return REFUSAL % (len(body), body)


class _Refuse(asyncio.Protocol):
    def __init__(self, limit: int):
        self.limit = limit

    def connection_made(self, transport):
        transport.write(refusal(self.limit))
        transport.close()


class CappedSite(web.TCPSite):
    """A TCPSite that serves at most `limit` connections at once."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, limit: int):
        super().__init__(runner, host, port)
        self.limit = limit

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server

        def connection():
            if len(server.connections) >= self.limit:
                return _Refuse(self.limit)
            return server()

        self._server = await asyncio.get_running_loop().create_server(
            connection, self._host, self._port, backlog=self._backlog,
            reuse_address=self._reuse_address, reuse_port=self._reuse_port)
        self._bound_port = self._server.sockets[0].getsockname()[1]
