"""Handshakes a service's bound sockets refused, in words. A peer without the cluster's key (or
with another's) is silent on both sides of a CURVE link: the caller only sees no answer, so the
service says in its log, at most every 10 s per reason, who knocked and why it was turned away."""

from __future__ import annotations

import logging
import time
from typing import Callable

import zmq
import zmq.asyncio
from zmq.utils.monitor import recv_monitor_message

log = logging.getLogger("llmbus.bus")

EVENTS = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
          | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
SAY_EVERY_S = 10.0


def reason(event: int, value: int, keyed: bool) -> str:
    """Why a handshake failed, from a monitor event and its value, for a service with a key or not."""
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return ("a caller knowing the cluster's public key but not its key pair was refused "
                f"(ZAP status {value})")
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
            return ("a caller without a key file was refused: this cluster uses CURVE keys "
                    "(give it --key-file or LLMBUS_KEY_FILE)" if keyed else
                    "a caller using a CURVE key was refused: this service has no key file "
                    "(give it the cluster's --key-file or LLMBUS_KEY_FILE)")
        if value == zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC and keyed:
            return "a caller with another cluster's key was refused (its key file is not this one)"
    return f"a handshake failed (zmq event {event}, value {value})"


class RefusedHandshakes:
    """Watches one bound socket; `said(text)` is called with each reason it logs."""

    def __init__(self, sock: zmq.asyncio.Socket, what: str, keyed: bool,
                 said: Callable[[str], None] = lambda text: None):
        self.what = what
        self.keyed = keyed
        self.count = 0
        self._sock = sock
        self._said = said
        self._last: dict[str, float] = {}
        self._mon = sock.get_monitor_socket(EVENTS)

    async def run(self) -> None:
        while True:
            m = await recv_monitor_message(self._mon)
            self.count += 1
            text = reason(int(m["event"]), int(m["value"]), self.keyed)
            now = time.monotonic()
            if now - self._last.get(text, -SAY_EVERY_S) >= SAY_EVERY_S:
                self._last[text] = now
                log.warning("%s: %s (%d refused so far)", self.what, text, self.count)
                self._said(text)

    def close(self) -> None:
        """After the task reading it was cancelled, before the socket closes."""
        self._sock.disable_monitor()
        self._mon.close(linger=0)
