"""/proc/PID/stat as the watcher reads it: CPU time and whether the process is stopped."""

import os
import signal
import subprocess
import sys

from services.health.procstat import _TICKS, parse_stat, sample
from tests.waiting import until_sync


def stat_line(comm: bytes, state: bytes, utime: int, stime: int) -> bytes:
    # Fields 1..17 of proc(5): pid (comm) state ppid pgrp session tty_nr tpgid flags minflt
    # cminflt majflt cmajflt utime stime cutime cstime
    return (b"4242 (" + comm + b") " + state + b" 1 4242 4242 0 -1 4194560 10 0 0 0 "
            + str(utime).encode() + b" " + str(stime).encode() + b" 0 0 20 0 1 0\n")


def test_running_stopped_and_traced_states():
    assert parse_stat(stat_line(b"python", b"R", 150, 50)).stopped is False
    assert parse_stat(stat_line(b"python", b"S", 0, 0)).stopped is False
    assert parse_stat(stat_line(b"python", b"T", 0, 0)).stopped is True
    assert parse_stat(stat_line(b"python", b"t", 0, 0)).stopped is True


def test_cpu_time_is_user_plus_system_in_seconds():
    assert parse_stat(stat_line(b"python", b"R", 150, 50)).cpu_s == (150 + 50) / _TICKS


def test_a_command_name_with_spaces_and_parentheses():
    s = parse_stat(stat_line(b"a) T (b", b"S", 7, 3))
    assert s.stopped is False and s.cpu_s == 10 / _TICKS


def test_malformed_lines_are_none():
    assert parse_stat(b"") is None
    assert parse_stat(b"4242 (python) R 1 2") is None
    assert parse_stat(stat_line(b"python", b"R", 1, 2).replace(b" 1 2 0 0 20", b" x 2 0 0 20")) is None


def test_a_real_process_seen_stopped_then_continued_then_gone():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        until_sync(lambda: sample(p.pid) is not None, 10, what="the child in /proc")
        os.kill(p.pid, signal.SIGSTOP)
        until_sync(lambda: sample(p.pid).stopped, 10, what="state T")
        os.kill(p.pid, signal.SIGCONT)
        until_sync(lambda: not sample(p.pid).stopped, 10, what="running again")
    finally:
        p.kill()
        p.wait()
    assert sample(p.pid) is None
