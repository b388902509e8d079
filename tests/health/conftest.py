"""One `llmbus up --shards 3` shared by the disruption tests (chaos, kill drills): one start."""

from __future__ import annotations

import pytest

from ..serve.stack import Stack


@pytest.fixture(scope="package")
def up3(tmp_path_factory, model_path):
    # The drills restart one service many times within a minute (test_scheduler_loss: the
    # scheduler six times, beside test_drills' kill): past the default budget (5 in 60 s) the
    # watcher would give it up, which is its own test's subject, not theirs. Their long greedy
    # descriptions must last long enough to be disturbed: no answer is ended for repeating a
    # phrase (the detector's own tests are tests/scheduler/test_phrase_loop.py).
    s = Stack(tmp_path_factory.mktemp("up3"), "--shards", "3", "--model", str(model_path),
              "--restart-budget", "20", "--phrase-repeats", "0")
    yield s
    s.close()
