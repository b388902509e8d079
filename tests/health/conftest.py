"""One `llmbus up --shards 3` shared by the disruption tests (chaos, kill drills): one start."""

from __future__ import annotations

import pytest

from ..serve.stack import Stack


@pytest.fixture(scope="package")
def up3(tmp_path_factory, model_path):
    # The drills restart one service many times within a minute (test_scheduler_loss: the
    # scheduler six times, beside test_drills' kill), each time one loss, not a crash loop.
    # Counted over the default window (60 s), those restarts would make the watcher wait ever
    # longer before each respawn (0.5, 1, 2, 4, 8 s: the client's pause, and the suite's time)
    # and then give the service up: both are their own tests' subject (test_policy.py,
    # test_failed_shard.py), not the drills'. Here a restart counts for 1 s, less than any two
    # losses of a drill are apart (each waits for its streams to move again first). Their long
    # greedy descriptions must last long enough to be disturbed: no answer is ended for
    # repeating a phrase (the detector's own tests are tests/scheduler/test_phrase_loop.py).
    s = Stack(tmp_path_factory.mktemp("up3"), "--shards", "3", "--model", str(model_path),
              "--budget-window", "1", "--phrase-repeats", "0")
    yield s
    s.close()
