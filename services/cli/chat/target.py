"""Which stack to talk to: the newest live `llmbus up` here, one by cluster, or a scheduler
address. Pure: it is given the list of running stacks (services/cli/stacks.py)."""

from __future__ import annotations

from dataclasses import dataclass

from bus.config import parse_peer

from .errors import NoStack

NO_STACK = "no llmbus stack is running on this machine: start one with `llmbus up`"


@dataclass(frozen=True)
class Target:
    scheduler: str              # "host:port" of the scheduler's RPC socket
    cluster: str | None = None  # None: learned from the scheduler's handshake
    model: str = ""
    shards: int = 0
    pid: int | None = None      # the `llmbus up` parent, when found through its stack file
    key_file: str = ""          # the stack's CURVE key file, when `llmbus up --key-file` says so

    def describe(self) -> str:
        model = self.model.rsplit("/", 1)[-1] if self.model else "?"
        where = f"cluster {self.cluster}" if self.cluster else self.scheduler
        shards = f", {self.shards} shards" if self.shards else ""
        return f"{model} ({where}{shards})"


def pick(stacks: list[dict], cluster: str | None = None, scheduler: str | None = None) -> Target:
    """The stack to use: `scheduler` as given, else the newest one (of `cluster`, if given)."""
    if scheduler is not None:
        try:
            parse_peer(scheduler)
        except ValueError:
            raise ValueError(f"--scheduler {scheduler!r}: expected HOST:PORT") from None
        return Target(scheduler=scheduler, cluster=cluster)
    if cluster is not None:
        stacks = [s for s in stacks if s.get("cluster") == cluster]
        if not stacks:
            raise NoStack(f"no llmbus stack of cluster {cluster!r} is running on this machine "
                          f"(start one with `llmbus up --cluster {cluster}`, or give --scheduler)")
    if not stacks:
        raise NoStack(NO_STACK)
    s = stacks[0]
    return Target(scheduler=s["scheduler"], cluster=s["cluster"], model=s.get("model", ""),
                  shards=int(s.get("shards", 0)), pid=s.get("pid"), key_file=s.get("key_file", ""))
