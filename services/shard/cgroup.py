"""Memory limits of Linux control groups, v1 (`memory.limit_in_bytes`) or v2 (`memory.max`),
whichever holds the memory controller on this machine.

A shard reads its own group's room (`own_room`): on a host whose memory is capped by a group
(a container, a systemd slice), free RAM says nothing of what the shard may use. Tests and
benches make groups (`MemoryGroup`) to stand for hosts that each have less memory than a model.
What a group is charged counts the page cache its processes fill (a file they read or map);
file pages no process maps are reclaimed under the limit, active or not, so the working set is
usage less those (less the inactive ones, where that is more).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

UNLIMITED = 1 << 62      # above this, v1 writes "no limit" (9223372036854771712)


class CgroupUnavailable(OSError):
    """No memory controller this process can use, with why."""


@dataclass(frozen=True)
class Hierarchy:
    """Where the memory controller is mounted, its version, and this process's group in it."""
    version: int          # 1 or 2
    mount: Path
    own: str              # this process's group, relative to the mount ("/" for the root)

    # The files each version names differently.
    @property
    def limit_file(self) -> str:
        return "memory.max" if self.version == 2 else "memory.limit_in_bytes"

    @property
    def usage_file(self) -> str:
        return "memory.current" if self.version == 2 else "memory.usage_in_bytes"

    @property
    def peak_file(self) -> str:
        return "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"

    def stat_key(self, v2_key: str) -> str:
        """memory.stat's name of a figure, given v2's: v1's "total_" figures count the group's
        descendants too, as v2's always do, and v1 calls file_mapped mapped_file."""
        if self.version == 2:
            return v2_key
        return "total_" + {"file_mapped": "mapped_file"}.get(v2_key, v2_key)

    def path(self, group: str) -> Path:
        return self.mount / group.lstrip("/")


def hierarchy(mountinfo: str | None = None, proc_cgroup: str | None = None) -> Hierarchy | None:
    """The memory controller's hierarchy (v1 where a v1 hierarchy holds it, else v2), or None."""
    mountinfo = _read("/proc/self/mountinfo") if mountinfo is None else mountinfo
    proc_cgroup = _read("/proc/self/cgroup") if proc_cgroup is None else proc_cgroup
    v1 = v2 = None
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        fstype, _, super_opts = line.split(" - ", 1)[1].split()[:3]
        if fstype == "cgroup" and "memory" in super_opts.split(","):
            v1 = Path(fields[4])
        elif fstype == "cgroup2":
            v2 = Path(fields[4])
    groups = {}
    for line in proc_cgroup.splitlines():
        num, controllers, group = line.split(":", 2)
        groups["v2" if num == "0" else controllers] = group
    if v1 is not None:
        own = next((g for c, g in groups.items() if "memory" in c.split(",")), "/")
        return Hierarchy(1, v1, own)
    if v2 is not None and "memory" in _read(v2 / "cgroup.controllers").split():
        return Hierarchy(2, v2, groups.get("v2", "/"))
    return None


def own_room(h: Hierarchy | None = None) -> int | None:
    """Bytes this process's group (and every group above it) can still give: the tightest limit
    less the working set charged under it. None when no limit applies."""
    h = h or hierarchy()
    if h is None:
        return None
    room = None
    group = h.own
    while True:
        d = h.path(group)
        limit = _number(d / h.limit_file)
        if limit is not None and limit < UNLIMITED:
            left = max(0, limit - working_set(h, d))
            room = left if room is None else min(room, left)
        if group in ("", "/"):
            return room
        group = os.path.dirname(group.rstrip("/")) or "/"


def working_set(h: Hierarchy, d: Path) -> int:
    """What a group holds that reclaim cannot take back at once: usage less the file pages no
    process maps (a model file read once, the weight cache of a shard that has stopped: on a
    host where a shard restarts they are active, and counting them as held left the new shard
    offering too little to be placed), or less the inactive ones, where those are more."""
    usage = _number(d / h.usage_file) or 0
    stat = memory_stat(d)
    inactive, active, mapped = (stat.get(h.stat_key(k), 0) for k in ("inactive_file", "active_file", "file_mapped"))
    return max(0, usage - max(inactive, inactive + active - mapped))


def memory_stat(d: Path) -> dict[str, int]:
    out = {}
    for line in _read(d / "memory.stat").splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[key] = int(value)
    return out


class MemoryGroup:
    """A group of its own with a memory limit: processes started through `argv` run in it.
    `close()` removes it (after its processes have ended)."""

    def __init__(self, limit: int, label: str = "host", h: Hierarchy | None = None):
        self.h = h or hierarchy()
        if self.h is None:
            raise CgroupUnavailable("no memory controller is mounted (neither cgroup v1 nor v2)")
        self.limit = limit
        parent = _parent_for_children(self.h)
        self.dir = self.h.path(parent) / f"llmbus-{label}-{uuid.uuid4().hex[:6]}"
        try:
            self.dir.mkdir()
            (self.dir / self.h.limit_file).write_text(str(limit))
        except OSError as e:
            self.close()
            raise CgroupUnavailable(f"cannot make a memory group under {self.dir.parent}: {e}") from e
        if self.h.version == 2:
            # No swap either: the group stands for a host with `limit` of RAM.
            _try_write(self.dir / "memory.swap.max", "0")
        else:
            _try_write(self.dir / "memory.memsw.limit_in_bytes", str(limit))

    @property
    def procs_file(self) -> Path:
        return self.dir / "cgroup.procs"

    def argv(self, argv: list[str]) -> list[str]:
        """`argv` run inside the group (the shell joins it, then becomes argv)."""
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.procs_file), *argv]

    def add(self, pid: int) -> None:
        self.procs_file.write_text(str(pid))

    def usage(self) -> int:
        return _number(self.dir / self.h.usage_file) or 0

    def peak(self) -> int | None:
        """The most the group was charged (None where the kernel does not keep it)."""
        return _number(self.dir / self.h.peak_file)

    def working_set(self) -> int:
        return working_set(self.h, self.dir)

    def refaulted(self) -> int | None:
        """Bytes of file pages the group read again after reclaim had taken them (None where the
        kernel does not count them): a group too small for what it maps reads its files over and
        over."""
        pages = memory_stat(self.dir).get(self.h.stat_key("workingset_refault_file"))
        return None if pages is None else pages * os.sysconf("SC_PAGE_SIZE")

    def oom_kills(self) -> int:
        """Processes the kernel killed for the limit."""
        events = self.dir / ("memory.events" if self.h.version == 2 else "memory.oom_control")
        for line in _read(events).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def pids(self) -> list[int]:
        return [int(p) for p in _read(self.procs_file).split()]

    def close(self) -> None:
        try:
            self.dir.rmdir()
        except FileNotFoundError:
            pass


def _parent_for_children(h: Hierarchy) -> str:
    """Where new groups can take the memory controller: v1 anywhere; v2 only under a group that
    enables it for its children and has no processes of its own (or the root)."""
    if h.version == 1:
        return h.own
    group = h.own
    while True:
        d = h.path(group)
        if group in ("", "/") or not _read(d / "cgroup.procs").split():
            if "memory" in _read(d / "cgroup.subtree_control").split() or \
                    _try_write(d / "cgroup.subtree_control", "+memory"):
                return group
        if group in ("", "/"):
            raise CgroupUnavailable("no cgroup v2 group here can enable the memory controller for "
                                    "its children (run under a delegated group, e.g. systemd-run --scope)")
        group = os.path.dirname(group.rstrip("/")) or "/"


def _read(path) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _number(path: Path) -> int | None:
    text = _read(path).strip()
    if text == "max":
        return UNLIMITED
    return int(text) if text.isdigit() else None


def _try_write(path: Path, text: str) -> bool:
    try:
        path.write_text(text)
        return True
    except OSError:
        return False
