"""``decoding.loop.run``: the loop makes every model call of a generation, counts them, and
refuses a prompt the target cannot hold."""

import pytest

from fake_models import noisy_markov_pair
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.errors import ContextFullError
from resispec_gguf.decoding import loop
from resispec_gguf.decoding.generation import Generation


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


@pytest.mark.parametrize("method", ["none", "chain"])
def test_a_ram_cache_restores_a_prompt_its_one_sequence_lost(method):
    """With ``ram``, a prompt evicted by another is saved, restored when it comes back (for
    each model it uses), and replied to as without the cache."""
    from resispec_gguf.decoding.promptcache import PromptCache

    a, b = list(range(1, 7)) * 7, list(range(6, 0, -1)) * 7  # 42 tokens each, sharing none
    outs = {}
    for with_ram in (False, True):
        target, draft = noisy_markov_pair(8, eog=7)
        ram = PromptCache(1 << 20) if with_ram else None
        seen = []
        for k, prompt in enumerate([a, b, a]):
            sp = SamplingParams(temperature=0.9, max_tokens=6, seed=k)
            gen = Generation(prompt, sp, DraftParams(method=method), vocab=target, has_draft=True, seed=k)
            list(loop.run(gen, target, draft, ram=ram))
            seen.append((gen.out, gen.stats.prompt_reused, target.prefilled))
        outs[with_ram] = seen, target, draft, ram
    (off, _, _, _), (on, target, draft, ram) = outs[False], outs[True]
    assert [o for o, _, _ in on] == [o for o, _, _ in off]
    assert off[2][1] == 0 and on[2][1] == len(a) - 1  # the third prompt came back whole
    assert on[2][2] == on[1][2]  # and prefilled nothing
    assert target.loads == 1 and draft.loads == (method != "none") and ram.hits == 1 + (method != "none")
