"""The watchdog that stops a template past its time (services/tokenizer/template_watchdog.py):
it stops a loop in the thread that renders (a worker thread, as the service renders), and its
exception never reaches code after the render, even where renders end at the very moment it
fires."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from services.tokenizer.errors import TemplateOverLimit
from services.tokenizer.templates import render

CHAT = [{"role": "user", "content": "hi"}]
LOOP = "{% for a in range(99999) %}{% for b in range(99999) %}{% endfor %}{% endfor %}"
# A few milliseconds of CPU, about the watchdog's tick: with no time at all it is mostly stopped,
# with 6 ms and more it renders, and between, its end and the watchdog's look come in any order.
BRIEF = "{% for a in range(20000) %}{{ a % 2 }}{% endfor %}"


def busy(seconds: float) -> int:
    """Python bytecode for `seconds` (where a stray exception would land)."""
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        n += 1
    return n


def test_a_loop_in_a_worker_thread_is_stopped_at_its_limit_and_the_thread_goes_on():
    def job():
        started = time.thread_time()
        with pytest.raises(TemplateOverLimit, match="time limit of 0.2 s"):
            render(LOOP, CHAT, _limits=(0.2, 2.0))
        took = time.thread_time() - started
        busy(0.05)
        return took, render("{{ messages[0].content }}", CHAT)

    with ThreadPoolExecutor(1) as pool:
        took, text = pool.submit(job).result(timeout=30)
    assert 0.2 <= took < 1.0 and text == "hi"


def test_renders_that_end_as_the_watchdog_fires_leave_no_exception_behind():
    outcomes = set()
    for i in range(100):
        try:
            render(BRIEF, CHAT, _limits=(0.002 * (i % 5), 1.0))
            outcomes.add("rendered")
        except TemplateOverLimit:
            outcomes.add("over")
        busy(0.0005)           # an OverTime raised late would land here
    busy(0.05)
    assert outcomes == {"rendered", "over"}
