"""Memory limits from control groups: v1 and v2 read from their own file layouts, and on this
machine a real group caps a process and tells the shard inside it how much room it has."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.shard.cgroup import CgroupUnavailable, Hierarchy, MemoryGroup, hierarchy, own_room
from tests.conftest import require

MiB = 1 << 20
ROOT = Path(__file__).resolve().parents[2]

V1_MOUNTS = """\
30 25 0:27 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu
31 25 0:28 / /sys/fs/cgroup/memory rw,relatime shared:10 - cgroup cgroup rw,memory
32 25 0:29 / /sys/fs/cgroup/unified rw,relatime shared:11 - cgroup2 cgroup2 rw
"""
V1_PROCS = "4:memory:/box/job\n1:cpu:/\n0::/\n"
V2_MOUNTS = "28 25 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
V2_PROCS = "0::/user.slice/job.scope\n"


def write(d: Path, **files: str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name.replace("_", ".", 1)).write_text(text)


def test_v1_is_found_where_its_hierarchy_holds_memory():
    h = hierarchy(V1_MOUNTS, V1_PROCS)
    assert h == Hierarchy(1, Path("/sys/fs/cgroup/memory"), "/box/job")
    assert (h.limit_file, h.usage_file) == ("memory.limit_in_bytes", "memory.usage_in_bytes")


def test_v2_is_found_when_it_has_the_memory_controller(tmp_path):
    write(tmp_path, cgroup_controllers="cpu io memory pids\n")
    mounts = V2_MOUNTS.replace("/sys/fs/cgroup", str(tmp_path))
    assert hierarchy(mounts, V2_PROCS) == Hierarchy(2, tmp_path, "/user.slice/job.scope")
    write(tmp_path, cgroup_controllers="cpu io pids\n")
    assert hierarchy(mounts, V2_PROCS) is None
    assert hierarchy("", "") is None


def test_v2_room_is_the_tightest_limit_above_less_its_working_set(tmp_path):
    h = Hierarchy(2, tmp_path, "/slice/job")
    write(tmp_path, memory_max="max\n", memory_current=str(9000 * MiB), memory_stat="inactive_file 0\n")
    write(tmp_path / "slice", memory_max=str(3000 * MiB), memory_current=str(1000 * MiB),
          memory_stat=f"anon 1\ninactive_file {400 * MiB}\n")
    write(tmp_path / "slice/job", memory_max=str(2000 * MiB), memory_current=str(900 * MiB),
          memory_stat=f"inactive_file {300 * MiB}\nactive_file 5\nfile_mapped 5\n")
    # job: 2000 - (900 - 300) = 1400; slice: 3000 - (1000 - 400) = 2400; the root: no limit.
    assert own_room(h) == 1400 * MiB
    (tmp_path / "slice/memory.max").write_text(str(1500 * MiB))
    assert own_room(h) == 900 * MiB
    for d in (tmp_path / "slice", tmp_path / "slice/job"):
        (d / "memory.max").write_text("max\n")
    assert own_room(h) is None


def test_file_pages_no_process_maps_are_room_active_or_not(tmp_path):
    # A shard restarted on its host: the weight cache the stopped one mapped, and the model file
    # read to build it, are still charged to the group, active; nothing maps them now.
    h = Hierarchy(2, tmp_path, "/host")
    write(tmp_path, memory_max="max\n", memory_current="1\n", memory_stat="")
    write(tmp_path / "host", memory_max=str(2258 * MiB), memory_current=str(926 * MiB),
          memory_stat=f"anon {39 * MiB}\ninactive_file {171 * MiB}\nactive_file {703 * MiB}\nfile_mapped 0\n")
    assert own_room(h) == (2258 - (926 - 171 - 703)) * MiB
    # Once a shard maps 600 MiB of them, those are held.
    (tmp_path / "host/memory.stat").write_text(
        f"inactive_file {171 * MiB}\nactive_file {703 * MiB}\nfile_mapped {600 * MiB}\n")
    assert own_room(h) == (2258 - (926 - 171 - 103)) * MiB
    # Mapped pages past the active ones: the inactive ones count, as before.
    (tmp_path / "host/memory.stat").write_text(
        f"inactive_file {171 * MiB}\nactive_file {100 * MiB}\nfile_mapped {250 * MiB}\n")
    assert own_room(h) == (2258 - (926 - 171)) * MiB


def test_v1_room_counts_its_total_inactive_files(tmp_path):
    h = Hierarchy(1, tmp_path, "/job")
    write(tmp_path, memory_limit_in_bytes="9223372036854771712\n", memory_usage_in_bytes="1\n")
    write(tmp_path / "job", memory_limit_in_bytes=str(1024 * MiB), memory_usage_in_bytes=str(800 * MiB),
          memory_stat=f"inactive_file {50 * MiB}\ntotal_inactive_file {200 * MiB}\n")
    assert own_room(h) == 424 * MiB
    (tmp_path / "job/memory.stat").write_text(
        f"inactive_file {50 * MiB}\ntotal_inactive_file {200 * MiB}\nactive_file {99 * MiB}\n"
        f"total_active_file {300 * MiB}\nmapped_file {9 * MiB}\ntotal_mapped_file {100 * MiB}\n")
    assert own_room(h) == (1024 - (800 - 200 - 200)) * MiB


def test_a_v2_group_is_made_where_memory_can_be_enabled_for_children(tmp_path):
    # The process's own group has processes (v2 gives no controller to children of such a
    # group): the group goes under the first ancestor that can.
    h = Hierarchy(2, tmp_path, "/a/b")
    write(tmp_path, cgroup_procs="1\n", cgroup_subtree_control="memory\n")
    write(tmp_path / "a", cgroup_procs="", cgroup_subtree_control="")
    write(tmp_path / "a/b", cgroup_procs="4242\n", cgroup_subtree_control="")
    g = MemoryGroup(512 * MiB, "x", h)
    assert g.dir.parent == tmp_path / "a"
    assert (tmp_path / "a/cgroup.subtree_control").read_text() == "+memory"
    assert (g.dir / "memory.max").read_text() == str(512 * MiB)
    assert (g.dir / "memory.swap.max").read_text() == "0"
    assert g.argv(["true"])[-1] == "true" and str(g.procs_file) in g.argv(["true"])


def test_no_memory_controller_is_a_clear_error(monkeypatch):
    monkeypatch.setattr("services.shard.cgroup.hierarchy", lambda: None)
    with pytest.raises(CgroupUnavailable, match="no memory controller"):
        MemoryGroup(MiB)


def real_group(limit: int) -> MemoryGroup:
    try:
        return MemoryGroup(limit, "test")
    except CgroupUnavailable as e:
        require(False, f"a memory group is needed: {e}")


def test_a_real_group_caps_its_process_and_its_shard_offers_what_is_left():
    g = real_group(160 * MiB)
    try:
        grow = subprocess.run(g.argv([sys.executable, "-c", "b = bytearray(400 << 20); b[::4096] = "
                                                            "b'x' * len(b[::4096])"]),
                              capture_output=True, text=True, timeout=60)
        assert grow.returncode != 0 and g.oom_kills() >= 1, grow
        assert g.peak() is None or g.peak() <= 160 * MiB
        # A shard started without --memory in this group offers less than the limit, not the
        # machine's free RAM.
        offer = subprocess.run(g.argv([sys.executable, "-c", "from services.shard.cli import "
                                                             "available_memory as a; print(a('cpu'))"]),
                               capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert offer.returncode == 0, offer.stderr
        assert 0 < int(offer.stdout) < 160 * MiB
    finally:
        g.close()


def test_refaulted_file_pages_are_read_from_either_layout(tmp_path):
    for version, stat in ((1, "workingset_refault_file 3\ntotal_workingset_refault_file 7\n"),
                          (2, "workingset_refault_file 5\n")):
        h = Hierarchy(version, tmp_path / str(version), "/")
        write(tmp_path / str(version), cgroup_procs="", cgroup_subtree_control="memory\n")
        g = MemoryGroup(512 * MiB, "x", h)
        write(g.dir, memory_stat=stat)
        page = os.sysconf("SC_PAGE_SIZE")
        assert g.refaulted() == (7 if version == 1 else 5) * page   # v1: the group's and its children's
        (g.dir / "memory.stat").write_text("cache 1\n")
        assert g.refaulted() is None                              # a kernel that does not count them


def test_a_real_group_too_small_for_its_file_reads_it_again(tmp_path):
    """What rpc_compare reports per host: a file read twice inside a group half its size comes back
    from the disk (its pages were reclaimed), one that fits stays in memory."""
    g = real_group(96 * MiB)
    try:
        if g.refaulted() is None:
            pytest.skip("this kernel does not count refaulted file pages")
        script = ("import os, sys; p, n = sys.argv[1], int(sys.argv[2])\n"
                  "with open(p, 'wb') as f: [f.write(os.urandom(1 << 20)) for _ in range(n)]; os.fsync(f.fileno())\n"
                  "for _ in range(2):\n"
                  "    with open(p, 'rb') as f:\n"
                  "        while f.read(1 << 20): pass\n")
        seen = {}
        for mib in (16, 192):
            before = g.refaulted()
            run = subprocess.run(g.argv([sys.executable, "-c", script, str(tmp_path / f"{mib}.bin"), str(mib)]),
                                 capture_output=True, text=True, timeout=120)
            assert run.returncode == 0, run.stderr
            seen[mib] = g.refaulted() - before
        assert seen[16] < 4 * MiB, seen
        assert seen[192] > 64 * MiB, seen          # the second read at least: 192 MiB where 96 fit
    finally:
        g.close()
