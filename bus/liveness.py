"""Who is alive, from heartbeats alone: a pure table, fed observations and the clock."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from wire.messages.bus import Heartbeat, Identity, Welcome
from wire.messages.info import ServiceInfo, info_of


@dataclass(frozen=True)
class PeerEntry(Identity):
    """A live service as the directory knows it: its identity, and what its last heartbeat (or
    handshake) said."""
    state: str = "starting"
    load: float = 0.0
    progress: int = 0
    info: ServiceInfo = field(default_factory=ServiceInfo)   # the kind's record (wire.messages.info)
    source: str = ""                # "mdns", "static" or "heartbeat"
    last_seen: float = 0.0
    last_progress_at: float = 0.0   # when `progress` last grew

    @classmethod
    def of(cls, m: Welcome | Heartbeat, source: str) -> "PeerEntry":
        """From a bus.welcome or bus.heartbeat (a handshake tells no load or progress)."""
        return cls(**vars(Identity.of(m)), state=m.state, load=getattr(m, "load", 0.0),
                   progress=getattr(m, "progress", 0), info=info_of(m.kind, m.info), source=source)

    @property
    def rpc_endpoint(self) -> str:
        return f"tcp://{self.host}:{self.rpc_port}"


class LivenessTable:
    """Entries keyed by service name; one epoch per name: the newest wins at the holder's own
    address, or once the holder's heartbeats have stopped."""

    def __init__(self, dead_after: float):
        self.dead_after = dead_after
        self.entries: dict[str, PeerEntry] = {}
        self.gone_epochs: dict[str, int] = {}   # last epoch of names that expired
        self.stale_heartbeats = 0
        # name -> (when last seen, the endpoints): two live processes heartbeating one name.
        self.clashes: dict[str, tuple[float, tuple[str, ...]]] = {}

    def observe(self, e: PeerEntry, now: float) -> str | None:
        """Record a heartbeat or handshake; returns 'new', 'restarted', or None (same epoch).

        An observation from an epoch older than the one known is stale and ignored ('stale').
        """
        old = self.entries.get(e.name)
        if old is None:
            self.entries[e.name] = replace(e, last_seen=now, last_progress_at=now)
            gone = self.gone_epochs.pop(e.name, None)
            return "restarted" if gone is not None and gone != e.epoch else "new"
        if e.rpc_endpoint != old.rpc_endpoint and e.epoch != old.epoch and self.is_alive(old, now):
            # Another process at another address under a name whose holder still heartbeats:
            # not a restart but a second process (or an impostor). Whatever its epoch, it never
            # takes the name over while the holder lives; once the holder's heartbeats stop, it
            # is a restart like any other.
            self.clashes[e.name] = (now, tuple(sorted((old.rpc_endpoint, e.rpc_endpoint))))
            if e.epoch < old.epoch:
                self.stale_heartbeats += 1
            return "clash"
        if e.epoch < old.epoch and self.is_alive(old, now):
            self.stale_heartbeats += 1
            return "stale"
        if e.epoch != old.epoch:
            self.entries[e.name] = replace(e, last_seen=now, last_progress_at=now)
            return "restarted"
        self.entries[e.name] = replace(
            e, last_seen=now, source=old.source or e.source,
            last_progress_at=now if e.progress != old.progress else old.last_progress_at)
        return None

    def is_alive(self, e: PeerEntry, now: float) -> bool:
        return now - e.last_seen <= self.dead_after

    def expire(self, now: float) -> list[PeerEntry]:
        """Drop and return the entries whose heartbeats stopped."""
        dead = [e for e in self.entries.values() if not self.is_alive(e, now)]
        for e in dead:
            del self.entries[e.name]
            self.gone_epochs[e.name] = e.epoch
        return dead

    def clashing(self, now: float) -> dict[str, tuple[str, ...]]:
        """Names two live processes use now (both heard within the liveness window), with the
        addresses of both."""
        return {n: eps for n, (at, eps) in self.clashes.items() if now - at <= self.dead_after}

    def live(self, now: float) -> list[PeerEntry]:
        return sorted((e for e in self.entries.values() if self.is_alive(e, now)),
                      key=lambda e: e.name)
