"""Logprobs: each emitted token's log-probability under the target at T = 1 before filters,
read from the rows the step already has, equal to a plain sequential forward pass's
log-softmax on the same text; and their OpenAI shapes (``LogprobsFormatter``)."""

import numpy as np
import pytest
from scipy.special import log_softmax

from resispec_gguf.kernels import sampling
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.errors import UserError
from resispec_gguf.decoding.stats import TokenLogprob


def _reference(logits, token, n):
    """Naive: log-softmax in float64, top n by (logprob desc, id asc)."""
    lp = log_softmax(np.asarray(logits, np.float64))
    order = np.lexsort((np.arange(len(lp)), -lp))
    finite = order[np.isfinite(lp[order])]
    return lp[token], finite[:n], lp[finite[:n]]


@pytest.mark.parametrize("vocab", [7, 300, 151936])
def test_token_logprob_matches_naive(vocab):
    rng = np.random.default_rng(vocab)
    for trial in range(5):
        row = (rng.normal(0, 4, vocab)).astype(np.float32)
        if trial == 1:
            row[rng.integers(0, vocab, vocab // 3 + 1)] = -np.inf
        if trial == 2:
            row[:4] = row.max()  # ties at the top go to the lower id
        tok = int(rng.integers(0, vocab))
        for n in (0, 1, 5, 20):
            lp, ids, lps = sampling.token_logprob(row, tok, n)
            rlp, rids, rlps = _reference(row, tok, n)
            assert lp == pytest.approx(rlp, abs=1e-9) or (lp == rlp == -np.inf)
            assert ids.tolist() == rids.tolist()
            np.testing.assert_allclose(lps, rlps, atol=1e-9)


CASES = [
    ("none", 1.0), ("none", 0.0), ("chain", 1.0), ("resispec", 1.0), ("resispec", 0.0), ("specinfer", 0.7),
    ("auto", 1.0), ("auto", 0.0),
]


@pytest.mark.parametrize("method,temperature", CASES)
def test_logprobs_equal_a_plain_forward_pass(engine, method, temperature):
    """Tree decodes, walked nodes, bonus rows and plain steps: each entry is the log-softmax of
    the sequential reference row at that position, whatever the sampling settings.  (A batched
    and a one-token decode sum in different orders: logits agree to ~1e-5 of their scale, so
    log-probabilities to a few 1e-4; a wrong row would be off by O(1).)"""
    prompt = engine.text_tokens("def fib(n):\n    return fib(n - 1) + fib(n - 2)\n\ndef fib(")
    n0 = len(prompt)
    sp = SamplingParams(temperature=temperature, top_k=20, top_p=0.9, max_tokens=24)
    dp = DraftParams(method=method, draws=3, depth=4, budget=10, lookup=method != "none")
    for seed in range(3):
        res = engine.generate(prompt, sp.replace(seed=seed), dp, logprobs=4)
        assert len(res.logprobs) == len(res.tokens) >= 1
        ref = engine.reference_logits(prompt + res.tokens)[n0 - 1:]
        for i, (entry, tok) in enumerate(zip(res.logprobs, res.tokens)):
            full = log_softmax(ref[i].astype(np.float64))
            rlp, rids, rlps = _reference(ref[i], tok, 4)
            assert entry.token == tok
            assert entry.logprob == pytest.approx(rlp, abs=5e-4), (i, method)
            assert len(entry.top) == 4 and len({t for t, _ in entry.top}) == 4
            np.testing.assert_allclose([lp for _, lp in entry.top], rlps, atol=5e-4)  # the 4 best values
            np.testing.assert_allclose([lp for _, lp in entry.top], [full[t] for t, _ in entry.top], atol=5e-4)
            assert all(a[1] >= b[1] for a, b in zip(entry.top, entry.top[1:]))


def test_logprobs_off_by_default_and_zero_alternatives(engine):
    sp = SamplingParams(temperature=0.8, max_tokens=8, seed=1)
    plain = engine.generate("Once upon a time", sp)
    assert plain.logprobs is None
    res = engine.generate("Once upon a time", sp, logprobs=0)
    assert res.tokens == plain.tokens  # asking for logprobs changes nothing else
    assert [e.top for e in res.logprobs] == [()] * len(res.tokens)
    with pytest.raises(UserError, match="logprobs"):
        engine.generate("a", sp, logprobs=-1)


@pytest.mark.parametrize("stop", [(), ("e",)])
def test_streamed_logprobs_concatenate_to_the_result(engine, stop):
    sp = SamplingParams(temperature=1.0, max_tokens=30, seed=7, stop=stop)
    pieces, entries = [], []
    for piece, lps in engine.stream_logprobs("Once upon a time", sp, DraftParams(method="resispec"), logprobs=2):
        pieces.append(piece)
        entries += lps
    res = engine.last_result
    assert "".join(pieces) == res.text
    assert entries == res.logprobs[: len(entries)]
    if not stop:
        assert entries == res.logprobs
    assert res.logprobs == engine.generate("Once upon a time", sp, DraftParams(method="resispec"), logprobs=2).logprobs


def test_logprobs_under_a_grammar_are_the_models_own(engine):
    """A constraint masks what may be drawn, not what is reported: the entries are the raw
    rows' log-softmax (tokens the grammar forbids keep their probability)."""
    prompt = engine.text_tokens("q")
    res = engine.generate(prompt, SamplingParams(temperature=1.0, seed=3, max_tokens=12), DraftParams(method="resispec"),
                          grammar='start: ("ab" | "cd")+ "!"', logprobs=3)
    assert len(res.logprobs) == len(res.tokens) >= 2
    ref = engine.reference_logits(prompt + res.tokens)[len(prompt) - 1:]
    for i, (entry, tok) in enumerate(zip(res.logprobs, res.tokens)):
        full = log_softmax(ref[i].astype(np.float64))
        assert entry.logprob == pytest.approx(full[tok], abs=5e-4)
        np.testing.assert_allclose([lp for _, lp in entry.top], np.sort(full)[::-1][:3], atol=5e-4)


# ---------------------------------------------------------------------------------- OpenAI's shapes

PIECES = {1: b"He", 2: b"llo", 3: b" \xe2\x82", 4: b"\xac", 5: b"Hi"}


def test_chat_logprobs_shape():
    from resispec_gguf.surfaces.logprobs import MIN_LOGPROB, LogprobsFormatter

    entries = [TokenLogprob(1, -0.25, ((1, -0.25), (5, -1.5))), TokenLogprob(3, -np.inf, ())]
    out = LogprobsFormatter(True, PIECES.__getitem__).format(entries)
    assert out == {"refusal": None, "content": [
        {"token": "He", "logprob": -0.25, "bytes": [72, 101], "top_logprobs": [
            {"token": "He", "logprob": -0.25, "bytes": [72, 101]}, {"token": "Hi", "logprob": -1.5, "bytes": [72, 105]}]},
        # part of a character: its bytes as \xNN in the text, exactly in bytes; -inf as OpenAI's floor
        {"token": " \\xe2\\x82", "logprob": MIN_LOGPROB, "bytes": [32, 226, 130], "top_logprobs": []},
    ]}


def test_completion_logprobs_shape_and_offsets():
    from resispec_gguf.surfaces.logprobs import LogprobsFormatter

    entries = [TokenLogprob(t, -float(t), ((t, -float(t)),) + (((5, -9.0),) if t != 5 else ())) for t in (1, 2, 3, 4, 5)]
    out = LogprobsFormatter(False, PIECES.__getitem__).format(entries)
    assert out["tokens"] == ["He", "llo", " \\xe2\\x82", "\\xac", "Hi"]
    assert out["token_logprobs"] == [-1.0, -2.0, -3.0, -4.0, -5.0]
    assert out["top_logprobs"][0] == {"He": -1.0, "Hi": -9.0} and out["top_logprobs"][4] == {"Hi": -5.0}
    # "Hello €Hi": the euro sign's second token starts after the character it completes
    assert out["text_offset"] == [0, 2, 5, 7, 7]
    # chunk by chunk, the lists concatenate to those of one call
    fmt = LogprobsFormatter(False, PIECES.__getitem__)
    parts = [fmt.format(entries[:1]), fmt.format(entries[1:3]), fmt.format([]), fmt.format(entries[3:])]
    assert {k: sum((p[k] for p in parts), []) for k in out} == out
