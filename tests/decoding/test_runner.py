"""``decoding.runner``: a batch stepped on a thread of its own, fed from several threads.

Requests with fixed shapes give in the runner what they give alone (their trees do not
depend on their neighbours), so each thread's reply is checked token for token; requests past
the slots wait their turn; a closed ticket leaves its slot at the next step; one request's
bad prompt fails that ticket only; a cancel event ends its request before the next step
with nobody reading it.
"""

from __future__ import annotations

import threading

import pytest

from law_harness import LOOKUP_PROMPT, PROMPT, TEMPERATURES, slotted_pair
from resispec_gguf.config import DraftParams
from resispec_gguf.engine import Engine
from resispec_gguf.errors import ContextFullError
from resispec_gguf.decoding.runner import Runner

T1 = TEMPERATURES["T1"]
DPS = [DraftParams(method="resispec", draws=3, depth=3, budget=6), DraftParams(method="chain", lookup=True),
       DraftParams(method="none"), DraftParams(method="specinfer", draws=2, depth=2, budget=4)]


def _alone(prompt, sp, dp):
    return Engine(*slotted_pair(1)).generate(prompt, sp, dp)


def test_threads_streaming_at_once_each_get_their_own_reply():
    # six requests, two slots: four wait their turn (no memory: each reply is compared with the
    # same request alone, whatever ran before it)
    engine = Engine(*slotted_pair(2), memory=None)
    jobs = [(PROMPT if i % 2 else LOOKUP_PROMPT, T1.replace(seed=i, max_tokens=16), DPS[i % 4]) for i in range(6)]
    got = [None] * len(jobs)

    def client(i):
        prompt, sp, dp = jobs[i]
        text = "".join(engine.stream(prompt, sp, dp))
        got[i] = (text, engine.last_result)  # this thread's own result

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for (prompt, sp, dp), (text, res) in zip(jobs, got):
        want = _alone(prompt, sp, dp)
        assert (res.tokens, res.finish_reason, text) == (want.tokens, want.finish_reason, want.text)
    assert engine.slots() == (0, 2, 0)
    engine.close()


def test_a_closed_ticket_frees_its_slot_for_the_next_request():
    engine = Engine(*slotted_pair(1 + 1))
    sp = T1.replace(seed=3, max_tokens=200)
    first = engine.submit(PROMPT, sp, DPS[2])
    second = engine.submit(PROMPT, sp.replace(seed=4), DPS[0])
    third = engine.submit(LOOKUP_PROMPT, sp.replace(seed=5, max_tokens=8), DPS[1])  # waits for a slot
    next(iter(first))
    first.close()
    second.close()
    res = first.result(30)
    assert res.finish_reason in ("interrupted", "eos", "length")
    text = "".join(third)
    want = _alone(LOOKUP_PROMPT, sp.replace(seed=5, max_tokens=8), DPS[1])
    assert third.result(30).tokens == want.tokens and text == want.text
    engine.close()


def test_a_prompt_that_cannot_fit_fails_its_own_ticket_only():
    engine = Engine(*slotted_pair(2, target_ctx=12))
    bad = engine.submit(list(range(5)) * 3, T1.replace(seed=1), DPS[0])
    good = engine.submit(PROMPT, T1.replace(seed=2, max_tokens=4), DPS[0])
    with pytest.raises(ContextFullError):
        list(bad)
    assert "".join(good) == _alone(PROMPT, T1.replace(seed=2, max_tokens=4), DPS[0]).text
    engine.close()


def test_closing_the_engine_ends_every_request():
    engine = Engine(*slotted_pair(2))
    tickets = [engine.submit(PROMPT, T1.replace(seed=i, max_tokens=10_000), DPS[2]) for i in range(3)]
    engine.close()
    for t in tickets:
        list(t)
        assert t.result(10).finish_reason in ("interrupted", "eos")


class _AfterSteps:
    """A cancel event that is set once ``gen`` has made ``n`` steps (no clock)."""

    def __init__(self, gen, n):
        self.gen, self.n = gen, n

    def is_set(self):
        return self.gen.stats.steps >= self.n


def test_a_cancel_event_frees_the_slot_at_the_next_step_though_nobody_reads_the_ticket():
    """A client gone while its request makes no text: the runner sees the event before the
    next step, not when a piece comes."""
    engine = Engine(*slotted_pair(2))
    sp = T1.replace(max_tokens=40)
    seed = next(s for s in range(200) if len(_alone(PROMPT, sp.replace(seed=s), DPS[2]).tokens) >= 10)
    gen = engine.generation(PROMPT, sp.replace(seed=seed), DPS[2])
    runner = Runner(engine.batch())
    ticket = runner.submit(gen, cancel=_AfterSteps(gen, 3))
    res = ticket.result(30)
    assert res.finish_reason == "interrupted" and res.stats.steps == 3
    assert runner.busy == 0
    runner.stop()
    engine.close()
