"""The real model against llama.cpp's logits, and split across shards against itself."""

import numpy as np
import pytest

from services.modelstore.weight_cache import load_weights
from services.shard.inprocess import Pipeline
from tests.engine.conftest import make_shard
from tests.engine.teacher import margins, teacher_forced

pytestmark = pytest.mark.slow

# The README's figures: the quantized format's top-5 logits within 1.0 of llama.cpp's, float32's
# 1.36 at worst.
QUANTIZED_MAX, FLOAT32_MAX = 1.0, 1.36


def test_the_readme_states_these_bounds():
    from tests.engine.test_handoff import readme
    assert f"reference chats within {QUANTIZED_MAX:.1f} of llama.cpp's" in readme()
    assert f"a little further from llama.cpp ({FLOAT32_MAX:g} at worst)" in readme()


@pytest.fixture(scope="module")
def one_shard_logits(real_weights, reference):
    return [teacher_forced(make_shard(real_weights).forward, chat) for chat in reference["chats"]]


@pytest.fixture(scope="module")
def quantized_logits(model_path, reference):
    """Through GGUF's blocks and the native kernel, activations rounded to 8 bits as llama.cpp rounds
    them: what a CPU shard runs by default."""
    loaded = load_weights(model_path, 0, 30, "quantized")
    return [teacher_forced(make_shard(loaded).forward, chat) for chat in reference["chats"]]


@pytest.mark.parametrize("weights", ["float32", "quantized"])
def test_teacher_forced_parity_with_llama_cpp(weights, request, reference):
    runs = request.getfixturevalue("one_shard_logits" if weights == "float32" else "quantized_logits")
    diffs = []
    for chat, logits in zip(reference["chats"], runs):
        top5 = chat["greedy_steps_top5"]
        ids = np.array([[t[0] for t in step] for step in top5])                  # (steps, 5)
        ref = np.array([[t[1] for t in step] for step in top5])
        sure = margins(chat) >= 1.0
        assert sure.any()
        np.testing.assert_array_equal(logits.argmax(1)[sure], ids[sure, 0])
        d = np.abs(np.take_along_axis(logits, ids, 1) - ref)
        assert d.mean() <= 0.35, d.mean()
        diffs.append(d.ravel())
    d = np.concatenate(diffs)
    print(f"\n{weights} vs llama.cpp: top-5 |logit diff| max {d.max():.4f}, mean {d.mean():.4f}, "
          f"{(d > 1.0).sum()} of {d.size} past 1.0")
    if weights == "quantized":
        # The README: llama.cpp's arithmetic (8-bit activations per block of 32), every top-5 logit
        # of the reference chats within 1.0 of llama.cpp's.
        assert d.max() <= QUANTIZED_MAX, (d.max(), (d > 1.0).sum())
        return
    # Exact float32 arithmetic, without llama.cpp's 8-bit activations: the reference is one draw of a
    # chaotic computation, and a 1-ulp change anywhere moves its logits. This forward lands 1.04 and
    # 1.36 from it on two of 400 top-5 logits (chat 0, step 10). llama.cpp itself, rerun here with one
    # norm nudged by +-1 ulp, lands 0.75-1.57 from the reference at worst and past 1.0 in 5 of 12 runs
    # (`python3 bench/parity_probe.py cloud 12`). Hence: 99% within 1.0, all within the README's
    # "1.36 at worst", itself inside llama.cpp's own spread.
    assert (d <= 1.0).mean() >= 0.99 and d.max() <= FLOAT32_MAX + 5e-3, (d.max(), (d > 1.0).sum())


def test_three_shards_give_identical_logits(real_weights, model_path, reference, one_shard_logits):
    seen = set()
    shards = [make_shard(model_path, a, a + 10, trace=lambda name, a: seen.add(a.dtype)) for a in (0, 10, 20)]
    pipe = Pipeline(shards)                                   # fp32 hand-off: the arrays themselves
    for chat, want in zip(reference["chats"][:2], one_shard_logits):
        np.testing.assert_array_equal(teacher_forced(pipe.forward, chat), want)
    assert seen == {np.dtype(np.float32)}
    assert all(s.kv.k.dtype == np.float16 for s in shards)
