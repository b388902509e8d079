"""Grammar masks on the last shard: a packed row of uint32 words limits a row of logits to the
tokens whose bits are set; every other row is left as it was."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.token_masks import BadMask, allowed, apply_token_masks


def pack(allowed_ids, vocab: int) -> np.ndarray:
    """The mask of `allowed_ids`, packed by hand: bit t % 32 of word t // 32."""
    words = np.zeros((vocab + 31) // 32, np.uint32)
    for t in allowed_ids:
        words[t // 32] |= np.uint32(1 << (t % 32))
    return words


def test_only_the_allowed_tokens_of_a_masked_row_keep_their_logits():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((3, 100)).astype(np.float32)
    before = logits.copy()
    keep = [0, 31, 32, 63, 99]
    out = apply_token_masks(logits, [1], pack(keep, 100)[None, :])
    assert np.array_equal(logits, before)                 # the input is never modified
    assert out.dtype == np.float32 and out.shape == logits.shape
    assert np.array_equal(out[[0, 2]], logits[[0, 2]])    # unmasked rows pay nothing
    assert np.array_equal(np.flatnonzero(np.isfinite(out[1])), keep)
    assert np.array_equal(out[1, keep], logits[1, keep])


def test_tokens_past_the_masks_bits_are_not_allowed():
    got = allowed(pack([1, 31], 32)[None, :], 40)
    assert np.flatnonzero(got[0]).tolist() == [1, 31]


@pytest.mark.parametrize("masks, rows", [
    (np.zeros((1, 4), np.int32), [0]),          # not uint32
    (np.zeros((2, 4), np.uint32), [0]),         # a mask per row
    (np.zeros((1, 4), np.uint32), [5]),         # a row past the logits
    (np.zeros((1, 0), np.uint32), [0]),         # no words
])
def test_masks_that_do_not_fit_the_logits_are_refused(masks, rows):
    with pytest.raises(BadMask):
        apply_token_masks(np.zeros((2, 100), np.float32), rows, masks)


@pytest.mark.parametrize("vocab, words", [(100, 4), (96, 3), (130, 4)])
def test_unpacked_bits_are_the_words_bits_in_order(vocab, words):
    """numpy's path (unpackbits) against the bits read one by one."""
    masks = np.random.default_rng(vocab).integers(0, 2 ** 32, (3, words), np.uint64).astype(np.uint32)
    want = [[t < words * 32 and bool((int(m[t // 32]) >> (t % 32)) & 1) for t in range(vocab)]
            for m in masks]
    assert allowed(masks, vocab).tolist() == want
