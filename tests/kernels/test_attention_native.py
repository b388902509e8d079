"""Decode attention read from the KV pages in C against the numpy gather-then-matmul version. The
caches hold float16, as a shard's do."""

import numpy as np
import pytest

import kernels.attention_native as an
from kernels.attention import attend_decode, window_bias
from tests.conftest import require

F = np.float32
H16 = np.float16


def case(seed, s_=7, h=9, kvh=3, dh=64, page=16, num_pages=256, max_len=90):
    rng = np.random.default_rng(seed)
    kc = rng.standard_normal((num_pages, page, kvh, dh), dtype=F).astype(H16)
    vc = rng.standard_normal((num_pages, page, kvh, dh), dtype=F).astype(H16)
    lens = rng.integers(1, max_len + 1, s_).astype(np.int32)
    lens[0] = 1                                               # a first decode: one key
    n_pages = int((lens.max() + page - 1) // page)
    table = rng.permutation(num_pages)[:s_ * n_pages].reshape(s_, n_pages).astype(np.int32)
    for s in range(s_):                                       # padding past a short context: page 0
        table[s, (lens[s] + page - 1) // page:] = 0
    q = rng.standard_normal((s_, h, dh), dtype=F)
    bias = np.where(np.arange(n_pages * page)[None] < lens[:, None], F(0), F(-np.inf))
    return q, kc, vc, table, lens, bias


@pytest.mark.parametrize("seed,shape", [(0, {}), (1, dict(h=4, kvh=4, dh=32, page=8)), (2, dict(s_=16, h=8, kvh=2)),
                                        (3, dict(dh=20, page=3, max_len=40)),
                                        # more heads than a block of scores takes at once (16), groups across its edge
                                        (4, dict(s_=3, h=40, kvh=8)), (5, dict(s_=2, h=24, kvh=24, dh=128))])
def test_matches_the_numpy_attention(seed, shape):
    q, kc, vc, table, lens, bias = case(seed, **shape)
    scale = F(1 / np.sqrt(q.shape[2]))
    want = attend_decode(np, q, kc, vc, table, bias, scale)
    got = an.attend_decode_paged(q, kc, vc, table, lens, scale)
    assert got.dtype == F and got.shape == q.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_numpy_fallback_gives_the_same(monkeypatch):
    require(an.load() is not None, "the native library is not built (pip install -e . with a C compiler builds it)")     # else both sides are the fallback
    q, kc, vc, table, lens, _ = case(4)
    native = an.attend_decode_paged(q, kc, vc, table, lens, F(0.125))
    monkeypatch.setattr(an, "load", lambda: None)
    np.testing.assert_allclose(an.attend_decode_paged(q, kc, vc, table, lens, F(0.125)), native, rtol=1e-5, atol=1e-5)


def test_a_sequence_reads_only_its_own_keys():
    """Keys past a sequence's length, in its last page, must not change its output."""
    q, kc, vc, table, lens, _ = case(5)
    before = an.attend_decode_paged(q, kc, vc, table, lens, F(0.125))
    s = int(np.argmax(lens % 16 != 0))
    page, slot = table[s, lens[s] // 16], lens[s] % 16
    kc[page, slot:] += 100
    vc[page, slot:] -= 100
    others = [i for i in range(len(lens)) if page not in table[i, : (lens[i] + 15) // 16]]
    after = an.attend_decode_paged(q, kc, vc, table, lens, F(0.125))
    np.testing.assert_array_equal(after[s], before[s])
    np.testing.assert_array_equal(after[others], before[others])


@pytest.mark.parametrize("bad", ["page", "len0", "len_long", "dtype", "shape"])
def test_bad_input_is_refused(bad):
    q, kc, vc, table, lens, _ = case(6)
    if bad == "page":
        table = table.copy(); table[0, 0] = kc.shape[0]
    elif bad == "len0":
        lens = lens.copy(); lens[1] = 0
    elif bad == "len_long":
        lens = lens.copy(); lens[1] = table.shape[1] * kc.shape[1] + 1
    elif bad == "dtype":
        kc = kc.astype(np.float32)
    elif bad == "shape":
        lens = lens[:-1]
    if bad in ("page", "len0", "len_long"):
        require(an.load() is not None, "checked by the native library, which is not built")
    with pytest.raises(ValueError):
        an.attend_decode_paged(q, kc, vc, table, lens, F(0.125))


def prompt_case(seed, n=100, h=9, kvh=3, dh=64, page=16):
    """A prompt's rows as the shard hands them over: row i a query over keys 0..i of shared pages."""
    rng = np.random.default_rng(seed)
    n_pages = (n + page - 1) // page
    kc = rng.standard_normal((n_pages + 3, page, kvh, dh), dtype=F).astype(H16)
    vc = rng.standard_normal((n_pages + 3, page, kvh, dh), dtype=F).astype(H16)
    q = rng.standard_normal((n, h, dh), dtype=F)
    table = np.tile(rng.permutation(n_pages + 3)[:n_pages].astype(np.int32), (n, 1))
    return q, kc, vc, table, np.arange(1, n + 1, dtype=np.int32)


@pytest.mark.parametrize("shape", [{}, dict(h=4, kvh=4, dh=32, page=8), dict(h=8, kvh=2, dh=20, page=3)])
def test_a_row_is_the_same_bits_alone_or_in_any_batch(shape):
    """The shard's 8-bit activations amplify any last-bit change: a row must not depend on its batch."""
    require(an.load() is not None, "the numpy fallback does not promise this, and the native library is not built")
    q, kc, vc, table, lens = prompt_case(7, **shape)
    whole = an.attend_decode_paged(q, kc, vc, table, lens, F(0.125))
    alone = np.stack([an.attend_decode_paged(q[i:i + 1], kc, vc, table[i:i + 1], lens[i:i + 1], F(0.125))[0]
                      for i in range(len(lens))])
    np.testing.assert_array_equal(whole, alone)
    order = np.random.default_rng(8).permutation(len(lens))
    for rows in np.array_split(order, 7):                   # shuffled batches of 14 or 15 rows
        np.testing.assert_array_equal(an.attend_decode_paged(q[rows], kc, vc, table[rows], lens[rows], F(0.125)),
                                      whole[rows])


def test_tiled_rows_at_long_lengths_are_the_bits_of_each_row_alone():
    """Rows of one prompt go through attention in tiles sharing each key block; rows near 1, 17, 1000
    and 3000 keys (a tile crossing each, one row of another sequence splitting a run) must each come
    out as the row-alone kernel computes it, and the same on every code path the CPU has."""
    require(an.load() is not None, "the numpy fallback does not promise this, and the native library is not built")
    import kernels.qmatmul as qm
    n = 3000
    rng = np.random.default_rng(11)
    q_all, kc, vc, table_all, lens_all = prompt_case(12, n=n)
    other = np.roll(table_all[0], 1)                           # another sequence: the same pages, shifted
    rows = np.r_[0:20, 990:1010, 2980:3000]                      # lens 1..20, 991..1010, 2981..3000
    q, table, lens = q_all[rows], table_all[rows], lens_all[rows].copy()
    split = 25                                                  # a row of the other sequence among them
    table[split], lens[split] = other, 500
    q = q + rng.standard_normal(q.shape, dtype=F) * F(4)       # sharp softmaxes, not only flat ones
    alone = np.stack([an.attend_decode_paged(q[i:i + 1], kc, vc, table[i:i + 1], lens[i:i + 1], F(0.125))[0]
                      for i in range(len(rows))])
    paths = {"auto"} | {p for p in ("avx2", "avx512", "generic") if qm.set_isa(p) == p}
    try:
        for path in sorted(paths):
            qm.set_isa(path)
            np.testing.assert_array_equal(an.attend_decode_paged(q, kc, vc, table, lens, F(0.125)), alone,
                                          err_msg=f"code path {path}")
    finally:
        qm.set_isa("auto")


def visible(len_: int, window: int) -> np.ndarray:
    """Keys the query at position len_-1 sees, from llama.cpp's rule (LLAMA_SWA_TYPE_STANDARD in
    llama_hparams::is_masked_swa): key p0 is masked for query p1 when p1 - p0 >= window."""
    p1 = len_ - 1
    return np.array([p0 for p0 in range(len_) if not (window and p1 - p0 >= window)])


def by_definition(q, kc, vc, table, lens, scale, window):
    """softmax(q . k * scale) . v over each row's visible keys, in float64, from the cache's pages, q
    rounded to float16 as the keys are."""
    page, kvh = kc.shape[1], kc.shape[2]
    out = np.empty(q.shape, np.float64)
    for s in range(len(lens)):
        keys = visible(int(lens[s]), window)
        pages, slots = table[s, keys // page], keys % page
        k, v = kc[pages, slots].astype(np.float64), vc[pages, slots].astype(np.float64)  # (n, KVH, Dh)
        for h in range(q.shape[1]):
            kh = h // (q.shape[1] // kvh)
            sc = k[:, kh] @ q[s, h].astype(np.float16).astype(np.float64) * scale
            p = np.exp(sc - sc.max())
            out[s, h] = (p / p.sum()) @ v[:, kh]
    return out


@pytest.mark.parametrize("window", [1, 5, 16, 37])
def test_a_window_sees_the_keys_llama_cpp_lets_it_see(window):
    q, kc, vc, table, lens, _ = case(9, max_len=90)
    lens[1:4] = [window, window + 1, 90]                    # at, just past and far past the window
    want = by_definition(q, kc, vc, table, lens, 0.125, window)
    got = an.attend_decode_paged(q, kc, vc, table, lens, F(0.125), window)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    # The numpy mask (kernels.attention.window_bias) is the same rule.
    bias = window_bias(lens, table.shape[1] * kc.shape[1], window, F)
    for s, len_ in enumerate(lens):
        np.testing.assert_array_equal(np.flatnonzero(bias[s] == 0), visible(int(len_), window))


def test_keys_before_the_window_are_not_read():
    """NaN in every key and value before each row's window: a read of one would make the row NaN."""
    require(an.load() is not None, "the numpy fallback reads every key, and the native library is not built")
    q, kc, vc, table, lens = prompt_case(13, n=70)
    window = 20
    before = an.attend_decode_paged(q, kc, vc, table, lens, F(0.125), window)
    first = np.arange(70 - window)                         # positions before the last row's window ...
    pages, slots = table[0, first // 16], first % 16
    kc[pages, slots], vc[pages, slots] = np.nan, np.nan
    rows = lens >= 70                                       # ... which only the last row does not see
    after = an.attend_decode_paged(q[rows], kc, vc, table[rows], lens[rows], F(0.125), window)
    np.testing.assert_array_equal(after, before[rows])


@pytest.mark.parametrize("shape", [{}, dict(h=4, kvh=1, dh=256, page=16), dict(h=8, kvh=2, dh=20, page=3)])
def test_a_windowed_row_is_the_bits_of_a_row_over_just_its_keys(shape):
    """Blocks of 16 count from a row's first key: a row of 100 keys through a window of 48 gives the
    bits of a row of 48 keys that starts at the window (a page boundary here), alone or in any tile."""
    require(an.load() is not None, "the numpy fallback does not promise this, and the native library is not built")
    import kernels.qmatmul as qm
    page = shape.get("page", 16)
    window = 48 if page != 3 else 45
    q, kc, vc, table, lens = prompt_case(14, n=100, **shape)
    whole = an.attend_decode_paged(q, kc, vc, table, lens, F(0.125), window)
    for i in range(len(lens)):
        skip = max(0, int(lens[i]) - window)
        if skip % page:
            continue
        short = an.attend_decode_paged(q[i:i + 1], kc, vc, table[i:i + 1, skip // page:], lens[i:i + 1] - skip,
                                       F(0.125))
        np.testing.assert_array_equal(whole[i], short[0], err_msg=f"row {i}")
    paths = {"auto"} | {p for p in ("avx2", "avx512", "generic") if qm.set_isa(p) == p}
    order = np.random.default_rng(15).permutation(len(lens))
    try:
        for path in sorted(paths):
            qm.set_isa(path)
            for rows in np.array_split(order, 6):
                np.testing.assert_array_equal(an.attend_decode_paged(q[rows], kc, vc, table[rows], lens[rows],
                                                                     F(0.125), window), whole[rows],
                                              err_msg=f"code path {path}")
    finally:
        qm.set_isa("auto")


def test_a_window_through_the_fallback_gives_the_same(monkeypatch):
    require(an.load() is not None, "the native library is not built (pip install -e . with a C compiler builds it)")
    q, kc, vc, table, lens = prompt_case(16, n=60)
    native = an.attend_decode_paged(q, kc, vc, table, lens, F(0.125), 25)
    monkeypatch.setattr(an, "load", lambda: None)
    np.testing.assert_allclose(an.attend_decode_paged(q, kc, vc, table, lens, F(0.125), 25), native,
                               rtol=1e-5, atol=1e-5)


def test_a_negative_window_is_refused():
    q, kc, vc, table, lens, _ = case(17)
    with pytest.raises(ValueError, match="window"):
        an.attend_decode_paged(q, kc, vc, table, lens, F(0.125), -1)


@pytest.mark.parametrize("dh,padded", [(48, 64), (112, 128), (240, 256), (80, 96)])
def test_every_head_size_sums_a_score_the_same_way(dh, padded):
    """Head sizes 64, 128 and 256 have loops of their own (constants to the compiler); others one loop
    for all. Zeros appended to q, k and v add +0 to each lane's sum: the bits stay those of dh."""
    require(an.load() is not None, "the native library is not built (pip install -e . with a C compiler builds it)")
    q, kc, vc, table, lens = prompt_case(18, n=40, h=4, kvh=1, dh=dh)
    pad = lambda a: np.concatenate([a, np.zeros(a.shape[:-1] + (padded - dh,), a.dtype)], axis=-1)  # noqa: E731
    want = an.attend_decode_paged(q, kc, vc, table, lens, F(0.125), 16)
    got = an.attend_decode_paged(pad(q), pad(kc), pad(vc), table, lens, F(0.125), 16)
    np.testing.assert_array_equal(got[..., :dh], want)


@pytest.mark.parametrize("dh", [64, 20])
def test_every_float16_of_the_cache_is_read_exactly_on_every_path(dh):
    """A row with one key weighs its value by exactly 1 (exp(0) = 1, divided by 1): its output is the
    value as read, so each of the 65536 float16s (subnormals, infinities, NaNs) must come out as
    numpy widens it, on every code path (dh=20 reaches the paths' one-at-a-time tails). A zero key
    keeps every score 0. (A sum starts at 0: -0 comes out +0, and a signalling NaN quiet.)"""
    require(an.load() is not None, "the native library is not built (pip install -e . with a C compiler builds it)")
    import kernels.qmatmul as qm
    bits = np.arange(1 << 16, dtype=np.uint32)
    rows = -(-bits.size // dh)
    values = np.zeros(rows * dh, np.uint16)
    values[:bits.size] = bits
    vc = values.view(H16).reshape(rows, 1, 1, dh)                  # row s: page s, slot 0
    kc = np.zeros_like(vc)
    q = np.ones((rows, 1, dh), F)
    table = np.arange(rows, dtype=np.int32)[:, None]
    with np.errstate(invalid="ignore"):                        # a signalling NaN, quieted by the add
        want = vc.reshape(rows, 1, dh).astype(F) + F(0)
    paths = {"auto"} | {p for p in ("avx2", "avx512", "generic") if qm.set_isa(p) == p}
    try:
        for path in sorted(paths):
            qm.set_isa(path)
            got = an.attend_decode_paged(q, kc, vc, table, np.ones(rows, np.int32), F(1))
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=f"code path {path}")
    finally:
        qm.set_isa("auto")
