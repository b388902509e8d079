"""EchoService: only the `bus.*` methods every service has."""

from bus.service import Service


class EchoService(Service):
    kind = "echo"
