"""``spec.loop.run``: the loop makes every model call of a generation, counts them, and
refuses a prompt the target cannot hold."""

import pytest

from fake_models import noisy_markov_pair
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.errors import ContextFullError
from resispec_gguf.spec import loop
from resispec_gguf.spec.generation import Generation


def _generation(target, dp):
    sp = SamplingParams(temperature=0.9, max_tokens=12, seed=5)
    return Generation([1, 2, 3], sp, dp, vocab=target, has_draft=True, seed=5)


def test_the_loop_refuses_a_prompt_that_cannot_fit():
    target, draft = noisy_markov_pair(8, eog=7, n_ctx=3)
    with pytest.raises(ContextFullError):
        list(loop.run(_generation(target, DraftParams(method="none")), target, draft))


@pytest.mark.parametrize("method", ["none", "chain", "resispec"])
def test_the_loop_counts_every_model_call(method):
    target, draft = noisy_markov_pair(8, eog=7)
    gen = _generation(target, DraftParams(method=method, depth=3, budget=4))
    text = "".join(loop.run(gen, target, draft))
    st = gen.stats
    assert st.target_calls == target.calls and st.draft_calls == draft.calls
    assert st.steps == st.target_calls and sum(st.steps_by_kind.values()) == st.steps
    assert st.tokens == len(gen.out) and gen.finish_reason in ("eos", "length")
    assert text.encode() == b"".join(target.token_piece(t) for t in gen.out)


class _AfterSteps:
    """A cancel event that is set once ``gen`` has made ``n`` steps (no thread, no clock)."""

    def __init__(self, gen, n):
        self.gen, self.n = gen, n

    def is_set(self):
        return self.gen.stats.steps >= self.n


def test_a_cancel_event_ends_the_reply_before_the_next_step():
    target, draft = noisy_markov_pair(8, eog=7)
    for seed in range(20):
        sp = SamplingParams(temperature=0.9, max_tokens=40, seed=seed)
        gen = Generation([1, 2, 3], sp, DraftParams(method="none"), vocab=target, has_draft=True, seed=seed)
        list(loop.run(gen, target, draft, cancel=_AfterSteps(gen, 3)))
        assert gen.stats.steps == 3 or gen.finish_reason == "eos" and gen.stats.steps < 3
        assert gen.finish_reason in (None, "eos")  # None: "interrupted"
