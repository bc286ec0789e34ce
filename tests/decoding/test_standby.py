"""decoding/standby.py: a draft that auto stopped calling is closed, and opened again for the
request that needs it; through ``Engine.load`` on the tiny pair, replies stay the reference's."""

from __future__ import annotations

from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.decoding.standby import IDLE_REQUESTS, REPROBE_REQUESTS, DraftStandby
from resispec_gguf.engine import Engine


class _Model:
    def __init__(self):
        self.closed = False

    def close(self):
        self.closed = True

    def describe(self):
        return {"path": "draft.gguf"}


def test_the_bookkeeping_closes_after_quiet_auto_requests_and_opens_for_who_needs_it():
    opened = []
    s = DraftStandby(lambda: opened.append(1) or _Model())
    auto, chain = DraftParams(method="auto"), DraftParams(method="chain")
    assert not s.wanted(chain)  # open: nothing to do
    for _ in range(IDLE_REQUESTS - 1):
        assert not s.finished("auto", 0)
    assert not s.finished("auto", 3)  # a request that called the draft starts the count again
    assert not s.finished("none", 0)  # and so does any other method's
    for _ in range(IDLE_REQUESTS - 1):
        assert not s.finished("auto", 0)
    assert s.finished("auto", 0) and s.released and s.releases == 1
    model = _Model()
    assert s.close(model) is None and model.closed and s.described == {"path": "draft.gguf"}
    assert s.wanted(chain) and s.wanted(DraftParams(method="resispec"))
    assert not s.wanted(chain.replace(use_draft=False, lookup=True)) and not s.wanted(DraftParams(method="none"))
    for _ in range(REPROBE_REQUESTS - 1):
        assert not s.wanted(auto)
        assert not s.finished("auto", 0)
    assert not s.wanted(auto)
    s.finished("none", 0)
    assert s.wanted(auto)  # long enough without it: auto may probe it again
    assert isinstance(s.open(), _Model) and opened == [1] and not s.released and s.quiet == 0


def test_through_the_engine_the_draft_is_closed_then_opened_again(tiny_pair):
    """Four auto requests that make no draft call close the draft (its cache freed, the
    engine still has a draft); a chain request opens it again and gets the reference reply."""
    with Engine.load(str(tiny_pair[0]), str(tiny_pair[1]), n_ctx=256, n_threads=1, flash_attn=False,
                     progress=False) as engine:
        assert engine.standby is not None and engine.draft is not None
        sp = SamplingParams(temperature=0.0, max_tokens=12)
        want = engine.generate("hello world", sp, DraftParams(method="none")).tokens
        full = engine.kv_bytes()
        for _ in range(IDLE_REQUESTS):
            got = engine.generate("hello world", sp, DraftParams(method="auto", use_draft=False))
            assert got.tokens == want
        assert engine.standby.released and engine.draft is None and engine.has_draft
        assert engine.kv_bytes() < full and engine.info()["draft"] is not None
        got = engine.generate("hello world", sp, DraftParams(method="chain"))
        assert got.tokens == want and got.stats.draft_calls > 0
        assert engine.draft is not None and not engine.standby.released and engine.kv_bytes() == full


def test_several_slots_keep_their_draft(tiny_pair):
    with Engine.load(str(tiny_pair[0]), str(tiny_pair[1]), n_ctx=256, n_threads=1, flash_attn=False,
                     n_slots=2, progress=False) as engine:
        assert engine.standby is None


def test_a_seeded_auto_request_runs_with_the_draft_open_as_on_a_fresh_engine(tiny_pair):
    """A seed reproduces a fresh engine's reply: a seeded auto request opens a closed draft
    and is not counted (module docstring), so the same seed gives the same reply before and
    after the draft was closed."""
    with Engine.load(str(tiny_pair[0]), str(tiny_pair[1]), n_ctx=256, n_threads=1, flash_attn=False,
                     progress=False) as engine:
        seeded = SamplingParams(temperature=1.0, max_tokens=12, seed=3)
        auto = DraftParams(method="auto", use_memory=False)
        first = engine.generate("seeds", seeded, auto).tokens
        for _ in range(IDLE_REQUESTS):  # seeded requests are not counted
            engine.generate("seeds", seeded, auto)
        assert not engine.standby.released
        quiet = SamplingParams(temperature=0.0, max_tokens=4)
        for _ in range(IDLE_REQUESTS):
            engine.generate("seeds", quiet, auto.replace(use_draft=False))
        assert engine.standby.released
        assert engine.generate("seeds", seeded, auto).tokens == first
        assert not engine.standby.released and engine.draft is not None


def test_the_standby_wants_the_draft_for_a_seeded_auto_request():
    s = DraftStandby(_Model)
    s.released = True
    assert s.wanted(DraftParams(method="auto"), seeded=True) and not s.wanted(DraftParams(method="auto"))
    assert not s.finished("auto", 0, seeded=True) and s.closed_for == 0
