"""Repetition, presence and frequency penalties, applied sparsely to the tokens a request has seen."""

import numpy as np


def apply_penalties(z, params, histories, steps, xp=np):
    """Penalize logits z (B, V) float32 in place, row r by params[r] against histories[r].

    histories[r] is prompt + generated tokens (host int array) and steps[r] how many of them
    were generated. Repetition (llama.cpp/HF): over the whole history, positive logits are
    divided by the penalty and negative ones multiplied. Presence and frequency (OpenAI):
    over generated tokens only, logit -= presence * [count > 0] + frequency * count.
    Repetition is applied first, as llama.cpp and vLLM do.
    """
    V = z.shape[1]
    rep_rows = [r for r, p in enumerate(params) if p.repetition_penalty != 1.0]
    if rep_rows:
        keys = _keys(V, rep_rows, [histories[r] for r in rep_rows])
        rows, toks = np.divmod(np.unique(keys), V)
        rep = np.array([p.repetition_penalty for p in params], dtype=np.float32)[rows]
        rows, toks, rep = xp.asarray(rows), xp.asarray(toks), xp.asarray(rep)
        v = z[rows, toks]
        z[rows, toks] = xp.where(v > 0, v / rep, v * rep)

    pf_rows = [r for r, p in enumerate(params)
               if (p.presence_penalty != 0.0 or p.frequency_penalty != 0.0) and steps[r] > 0]
    if pf_rows:
        generated = [np.asarray(histories[r])[len(histories[r]) - steps[r]:] for r in pf_rows]
        keys, counts = np.unique(_keys(V, pf_rows, generated), return_counts=True)
        rows, toks = np.divmod(keys, V)
        pres = np.array([p.presence_penalty for p in params], dtype=np.float32)[rows]
        freq = np.array([p.frequency_penalty for p in params], dtype=np.float32)[rows]
        delta = pres + freq * counts.astype(np.float32)  # (n,) float32: counts > 0 here
        z[xp.asarray(rows), xp.asarray(toks)] -= xp.asarray(delta)
    return z


def _keys(V, rows, seqs):
    # One flat key per (row, token) so a single np.unique dedups and counts the whole batch.
    parts = [r * V + np.asarray(s, dtype=np.int64) for r, s in zip(rows, seqs)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
