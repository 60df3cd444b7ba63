"""The sampler against an independent transcription of run.c's arithmetic.

The RNG is integer-exact. For softmax the oracle takes the C softmax's probabilities (expf is
libm's) and re-does the selection (argmax, multinomial, top-p) in float32 in Python."""

from __future__ import annotations

import numpy as np
import pytest

from isaforge import _native
from isaforge.runtime.sampler import Sampler, check_sampling

M64 = (1 << 64) - 1


def oracle_u32(state: int) -> tuple[int, int]:
    state ^= state >> 12
    state = (state ^ (state << 25)) & M64
    state ^= state >> 27
    return ((state * 0x2545F4914F6CDD1D) & M64) >> 32, state


def oracle_f32(state: int) -> tuple[np.float32, int]:
    u, state = oracle_u32(state)
    return np.float32(u >> 8) / np.float32(16777216.0), state


def oracle_select(probs: np.ndarray, topp: float, coin: np.float32) -> int:
    f = np.float32
    n = len(probs)
    if topp <= 0 or topp >= 1:
        cdf = f(0)
        for i in range(n):
            cdf = f(cdf + probs[i])
            if coin < cdf:
                return i
        return n - 1
    cutoff = f(f(1.0) - f(topp)) / f(n - 1)
    cand = [i for i in range(n) if probs[i] >= cutoff]
    cand.sort(key=lambda i: (-probs[i], i))  # descending, stable
    cum, last = f(0), len(cand) - 1
    for j, i in enumerate(cand):
        cum = f(cum + probs[i])
        if cum > f(topp):
            last = j
            break
    r = f(coin * cum)
    cdf = f(0)
    for j in range(last + 1):
        cdf = f(cdf + probs[cand[j]])
        if r < cdf:
            return cand[j]
    return cand[last]


def test_rng_matches_integer_oracle():
    for seed in (1, 42, 7, 2**63 + 12345):
        s_c = s_o = seed
        for _ in range(50):
            u, s_c = _native.random_u32(s_c)
            v, s_o = oracle_u32(s_o)
            assert (u, s_c) == (v, s_o)


def test_rng_first_values_seed_42_by_hand():
    # state 42 -> 42 ^ (42 >> 12) = 42; ^= 42 << 25; ^= >> 27; times the constant, high 32 bits
    s = 42
    s ^= s << 25
    s ^= s >> 27
    expect = ((s * 0x2545F4914F6CDD1D) & M64) >> 32
    assert _native.random_u32(42)[0] == expect
    f, _ = _native.random_f32(42)
    assert f == np.float32(expect >> 8) / np.float32(16777216.0)


def test_softmax_is_close_to_exact_and_sums_to_one():
    rng = np.random.default_rng(0)
    x = rng.normal(size=1000).astype(np.float32) * 5
    y = x.copy()
    _native.softmax(y)
    exact = np.exp(x.astype(np.float64) - x.max())
    exact /= exact.sum()
    assert np.max(np.abs(y - exact) / exact) < 1e-5
    assert abs(float(y.astype(np.float64).sum()) - 1.0) < 1e-5


def test_temperature_zero_is_first_argmax():
    logits = np.array([0.1, 3.0, -1.0, 3.0], np.float32)
    assert _native.sample(logits.copy(), 0.0, 0.9, 1)[0] == 1


@pytest.mark.parametrize("temperature,topp", [(1.0, 0.9), (1.0, 1.0), (0.8, 0.95), (1.3, 0.5),
                                              (1.0, 0.0), (0.5, 0.99)])
def test_selection_matches_oracle(temperature, topp):
    rng = np.random.default_rng(int(temperature * 100 + topp * 10))
    for trial in range(200):
        n = int(rng.integers(2, 600))
        logits = (rng.normal(size=n) * rng.uniform(0.1, 6)).astype(np.float32)
        if trial % 5 == 0:  # ties in probability exercise the stable sort
            logits[: n // 2] = logits[0]
        seed = int(rng.integers(1, 2**62))
        tok, state = _native.sample(logits.copy(), temperature, topp, seed)
        probs = (logits / np.float32(temperature)).astype(np.float32)
        _native.softmax(probs)
        coin, ostate = oracle_f32(seed)
        assert state == ostate
        assert tok == oracle_select(probs, topp, coin), (trial, n)


def test_hand_computed_topp_case():
    # probs 0.5, 0.3, 0.15, 0.05; top-p 0.7 keeps the first two (cum 0.8 > 0.7); r = coin*0.8
    probs = np.array([0.15, 0.5, 0.05, 0.3], np.float32)
    assert oracle_select(probs, 0.7, np.float32(0.0)) == 1
    assert oracle_select(probs, 0.7, np.float32(0.7)) == 3  # r = 0.56 >= 0.5
    assert oracle_select(probs, 0.7, np.float32(0.99)) == 3
    # multinomial walks the original order: cdf 0.15, 0.65, 0.70, 1.0
    assert oracle_select(probs, 1.0, np.float32(0.66)) == 2


def test_sampler_seed_zero_means_clock_and_validation():
    assert Sampler(1.0, 0.9, 0).seed > 0
    assert Sampler(1.0, 0.9, 5).state == 5
    for t, p in ((-1, 0.9), (float("nan"), 0.9), (1.0, 2.0), (1.0, -0.1)):
        with pytest.raises(ValueError):
            check_sampling(t, p)


def test_generation_loop_matches_oracle_sampling(stories):
    """Sampled generation through the Model equals an independent run.c-style loop over the
    same C logits with the oracle sampler."""
    import isaforge

    m = isaforge.load(stories / "stories260K.bin", stories / "tok512.bin")
    prompt = "Once upon a time"
    for temperature, topp, seed in ((1.0, 0.9, 42), (1.0, 1.0, 42), (0.8, 0.95, 7)):
        got = [nxt for _, nxt in m.generate_ids(prompt, None, temperature, topp, seed,
                                                steps=100, stop_ids=(1,))]
        tokens = m.encode(prompt)
        state, out, token = seed, [], tokens[0]
        for pos in range(100):
            logits = m.engine.forward(token, pos).copy()
            if pos < len(tokens) - 1:
                nxt = tokens[pos + 1]
            else:
                probs = (logits / np.float32(temperature)).astype(np.float32)
                _native.softmax(probs)
                coin, state = oracle_f32(state)
                nxt = oracle_select(probs, topp, coin)
            if nxt == 1:
                break
            out.append(nxt)
            token = nxt
        assert got == out


def test_repeat_penalty_follows_llama_cpp():
    """Distinct tokens of the last n seen: positive logits divided, others multiplied; the
    sampled token joins the window; 1.0 leaves run.c's sampler alone."""
    logits = np.array([1.0, 2.2, 2.0, -1.0, -0.5], np.float32)
    assert Sampler(0.0, 0.9, 1).sample(logits) == 1
    s = Sampler(0.0, 0.9, 1, repeat_penalty=1.25, repeat_last_n=3)
    s.accept([4, 1, 1, 1])  # window keeps [1, 1, 1]: token 1 penalized once (2.2 / 1.25 = 1.76)
    assert s.sample(logits) == 2
    assert list(s.history) == [1, 1, 2]
    assert s.sample(logits) == 1  # 1.76 beats 2.0 / 1.25 = 1.6
    # a negative logit is multiplied (pushed down), not divided (which would pull it up)
    neg = np.array([-1.0, -0.5], np.float32)
    s = Sampler(0.0, 0.9, 1, repeat_penalty=4.0)
    s.accept([1])
    assert s.sample(neg) == 0  # -0.5 * 4 = -2 < -1
    # a penalty below 1 rewards repeats
    s = Sampler(0.0, 0.9, 1, repeat_penalty=0.4)
    s.accept([0])
    assert s.sample(logits) == 0  # 1.0 / 0.4 = 2.5 > 2.2


def test_repeat_penalty_exact_values():
    logits = np.linspace(-2, 2, 9, dtype=np.float32)
    s = Sampler(0.0, 0.9, 1, repeat_penalty=1.1, repeat_last_n=64)
    s.accept([0, 8, 8])
    pen = np.float32(1.1)
    want = logits.copy()
    want[0] = logits[0] * pen
    want[8] = logits[8] / pen
    # 2/1.1 = 1.818 < 1.5? no: the argmax stays 8 only if 1.818 > 1.5
    assert s.sample(logits) == int(np.argmax(want)) == 8
    s = Sampler(0.0, 0.9, 1, repeat_penalty=1.5, repeat_last_n=64)
    s.accept([8])
    assert s.sample(logits) == 7  # 2 / 1.5 = 1.333 < 1.5


def test_repeat_penalty_rejects_nonsense():
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="repeat penalty"):
            Sampler(1.0, 0.9, 1, repeat_penalty=bad)


def _rows_case(rng, vocab=300):
    """Samplers of every kind (T = 0, a temperature float32 rounds to 0, seeded T > 0 with and
    without top-p, repetition penalties with windows holding out-of-range ids) and logits with
    ties, infinities and a NaN row."""
    kinds = [(0.0, 0.9, 1.0), (1e-46, 0.9, 1.1), (0.8, 0.9, 1.0), (1.0, 1.0, 1.3),
             (0.0, 0.9, 1.25), (1.2, 0.5, 0.8), (0.0, 0.9, 1.1), (0.7, 0.95, 1.1)]
    samplers = []
    for i, (t, p, pen) in enumerate(kinds):
        s = Sampler(t, p, 1000 + i, repeat_penalty=pen, repeat_last_n=16)
        s.accept([int(x) for x in rng.integers(0, vocab, size=int(rng.integers(0, 30)))]
                 + [vocab + 5, -3][:i % 3])
        samplers.append(s)
    logits = (rng.normal(size=(len(kinds), vocab)) * 3).astype(np.float32)
    logits[1, :40] = logits[1].max() + 1  # ties: the first maximum wins
    logits[4, 7] = np.inf
    logits[6, 11] = np.nan  # numpy's argmax would say 11; the C sampler's comparisons do not
    return samplers, logits


def test_rows_sample_as_each_sampler_alone():
    """penalize_rows + draw_rows: every row's token, RNG state and window equal to its own
    Sampler.sample on that row, over many steps of mixed kinds."""
    import copy

    from isaforge.runtime.sampler import draw_rows, penalize_rows

    rng = np.random.default_rng(7)
    for trial in range(40):
        samplers, logits = _rows_case(rng)
        alone = copy.deepcopy(samplers)
        for step in range(3):
            want = [s.sample(logits[r]) for r, s in enumerate(alone)]
            buf = logits.copy()
            penalize_rows(samplers, buf)
            got = draw_rows(samplers, buf)
            assert got == want, (trial, step)
            assert [s.state for s in samplers] == [s.state for s in alone]
            assert [list(s.history) for s in samplers] == [list(s.history) for s in alone]
            logits = np.roll(logits, 3, axis=1)
    # a subset of rows (the scheduler's live rows) and one row alone
    samplers, logits = _rows_case(rng)
    alone = copy.deepcopy(samplers)
    pick = [6, 2, 0]
    want = [alone[r].sample(logits[r]) for r in pick]
    buf = logits[pick].copy()
    penalize_rows([samplers[r] for r in pick], buf)
    assert draw_rows([samplers[r] for r in pick], buf) == want


def test_penalize_rows_writes_what_sample_draws_from():
    from isaforge.runtime.sampler import penalize_rows

    logits = np.array([[1.0, 2.2, 2.0, -1.0], [0.5, -0.5, 3.0, 1.0]], np.float32)
    a = Sampler(0.0, 0.9, 1, repeat_penalty=1.25, repeat_last_n=8)
    a.accept([1, 3, 1, 9])  # 9 is outside the vocabulary: ignored
    b = Sampler(0.0, 0.9, 1)  # no penalty: row unchanged
    b.accept([0, 1])
    buf = logits.copy()
    penalize_rows([a, b], buf)
    pen = np.float32(1.25)
    assert np.array_equal(buf[0], np.array([1.0, np.float32(2.2) / pen, 2.0, -1.0 * pen],
                                           np.float32))
    assert np.array_equal(buf[1], logits[1])
