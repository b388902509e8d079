"""Teacher-forced runs of the reference chats: the prompt, then the reference's greedy tokens one by one."""

from __future__ import annotations

import numpy as np

from services.shard.inprocess import Chunk, PageAllocator, build_batch


def teacher_forced(forward, chat: dict, num_pages: int = 64, page_size: int = 16) -> np.ndarray:
    """Logits (steps, vocab) at each greedy step of `chat`, through `forward(batch)`."""
    pages = PageAllocator(num_pages, page_size)
    prompt, greedy = chat["prompt_ids"], chat["greedy_ids"]
    out = [forward(build_batch([Chunk(0, prompt, 0)], pages))[0]]
    for step in range(1, len(chat["greedy_steps_top5"])):
        out.append(forward(build_batch([Chunk(0, [greedy[step - 1]], len(prompt) + step - 1)], pages))[0])
    return np.array(out)


def margins(chat: dict) -> np.ndarray:
    """The reference's top-1 minus top-2 logit at each step."""
    return np.array([s[0][1] - s[1][1] for s in chat["greedy_steps_top5"]])
