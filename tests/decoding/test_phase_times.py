"""Where a generation's prompt time goes: ``Stats.prompt_target_time`` and
``prompt_draft_time`` measured where each model takes the prompt, on the tiny GGUF pair (one
sequence, ``loop.run``) and on slotted Markov fakes (``batch``, prefill in chunks beside other
requests' steps).  No timing is compared with a number: only which parts were measured and
that they add up."""

from __future__ import annotations

import pytest

from law_harness import slotted_pair
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.engine import Engine, Stats

SP = SamplingParams(temperature=0.0, max_tokens=6, seed=0)


def _check_parts(st: Stats, drafted: bool) -> None:
    assert st.prompt_target_time > 0
    assert (st.prompt_draft_time > 0) == drafted
    assert st.prompt_target_time + st.prompt_draft_time <= st.prompt_time + 1e-9
    assert st.prompt_host_time == pytest.approx(st.prompt_time - st.prompt_target_time - st.prompt_draft_time)
    assert st.end_to_end_time == pytest.approx(st.prompt_time + st.total_time)
    assert st.end_to_end_tokens_per_s == pytest.approx(st.tokens / st.end_to_end_time)
    assert st.end_to_end_tokens_per_s <= st.tokens_per_s
    d = st.as_dict()
    assert d["prompt_target_time_s"] == st.prompt_target_time and d["prompt_draft_time_s"] == st.prompt_draft_time
    assert d["end_to_end_tokens_per_s"] == st.end_to_end_tokens_per_s


@pytest.mark.parametrize("method, drafted", [("none", False), ("resispec", True), ("chain", True)])
def test_the_prompt_time_splits_into_the_target_s_and_the_draft_s_on_the_tiny_pair(engine, method, drafted):
    prompt = engine.text_tokens("Once upon a time " * 12 + method)  # a prompt no earlier call cached
    res = engine.generate(prompt, SP, DraftParams(method=method))
    _check_parts(res.stats, drafted)
    assert res.stats.prompt_reused < len(prompt) - 1


def test_a_prompt_already_cached_still_splits(engine):
    prompt = engine.text_tokens("The same prompt twice, the second time cached.")
    engine.generate(prompt, SP, DraftParams(method="resispec"))
    again = engine.generate(prompt, SP, DraftParams(method="resispec")).stats
    assert again.prompt_reused > 0
    assert again.prompt_target_time + again.prompt_draft_time <= again.prompt_time + 1e-9


def test_merged_stats_add_the_parts():
    a = Stats(prompt_time=1.0, prompt_target_time=0.6, prompt_draft_time=0.3, tokens=2, total_time=1.0)
    b = Stats(prompt_time=0.5, prompt_target_time=0.2, prompt_draft_time=0.1, tokens=4, total_time=1.0)
    a.merge(b)
    assert (a.prompt_target_time, a.prompt_draft_time) == pytest.approx((0.8, 0.4))
    assert a.prompt_host_time == pytest.approx(0.3) and a.end_to_end_tokens_per_s == pytest.approx(6 / 3.5)
    assert Stats().end_to_end_tokens_per_s == 0.0


def test_batched_requests_split_their_prefill_per_model():
    """Requests in the same steps: the first prefills alone; a late one in chunks carried by
    the running request's draft and target decodes, each counted to its model."""
    long_reply = SamplingParams(temperature=1.0, max_tokens=40)
    alone = Engine(*slotted_pair(1))
    seed = next(s for s in range(200)  # a reply that runs past the late prompt's prefill
                if len(alone.generate([1, 2, 3, 1] * 5, long_reply.replace(seed=s), DraftParams(method="none")).tokens) >= 20)
    target, draft = slotted_pair(2)
    engine = Engine(target, draft)
    batch = engine.batch(chunk=4)
    first = batch.admit(engine.generation([1, 2, 3, 1] * 5, long_reply.replace(seed=seed), DraftParams(method="none")))
    batch.step()
    late = batch.admit(engine.generation([0, 2, 4, 1, 3] * 5, SamplingParams(temperature=1.0, max_tokens=4, seed=1),
                                         DraftParams(method="chain")))
    while not late.started:
        batch.step()
    assert not first.done  # the late prompt was prefilled beside the first request's steps
    while not late.done:
        batch.step()
    _check_parts(late.gen.stats, drafted=True)
    assert late.gen.stats.prompt_tokens == 25 and first.gen.stats.prompt_tokens == 20
    while not first.done:
        batch.step()
    _check_parts(first.gen.stats, drafted=False)
