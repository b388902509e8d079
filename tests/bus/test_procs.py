"""The tests' process starter itself: what a started process prints never blocks it, and a failure
report says where a process that stopped answering is stuck."""

from __future__ import annotations

import sys
import time

from .procs import Procs

STUCK = """
import time
def waiting_in_here():
    time.sleep(60)
print("up", flush=True)
waiting_in_here()
"""


def test_a_chatty_process_never_blocks_and_a_report_shows_where_one_is_stuck():
    procs = Procs()
    try:
        # 256 KiB into a pipe nobody reads would block this child in its write for good.
        chatty = procs.start([sys.executable, "-c", "import sys; sys.stdout.write('x' * 262144); print('done')"])
        assert chatty.wait(30) == 0
        assert procs.output(chatty).endswith("x" * 10 + "done\n")
        stuck = procs.start([sys.executable, "-c", STUCK])
        deadline = time.monotonic() + 30
        while "up" not in procs.output(stuck) and time.monotonic() < deadline:
            time.sleep(0.02)
        report = procs.report(stacks=True)
        assert stuck.poll() is not None and chatty.returncode == 0
        assert "exited 0" in report and f"exited {stuck.returncode}" in report
        assert "waiting_in_here" in report, report       # its stack, from the faulthandler
    finally:
        procs.stop_all()
