"""``decoding.drafting.DraftPhase``: how a generation grows its step's tree, each method
driven alone on Markov fakes: the draft calls' layout, the uniforms a node takes from the
request's stream, certain positions under a constraint, lookup trees."""

import numpy as np
import pytest

from fake_models import noisy_markov_pair
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.decoding import drafting
from resispec_gguf.decoding.generation import Generation
from resispec_gguf.decoding.steps import Decode
from resispec_gguf.decoding.tree import DraftTree

V = 8
SEED = 11
PHASE = ("_grow_tree", "_lookup_draw", "_tail_draw", "_certain", "_certain_draw", "_draft_call", "_propose",
         "_draw")


def _gen(dp, *, prompt=(1, 2, 3), temperature=0.9, constraint=None, has_draft=True):
    target, _ = noisy_markov_pair(V, eog=7)
    return Generation(list(prompt), SamplingParams(temperature=temperature, max_tokens=16, seed=SEED), dp,
                      vocab=target, has_draft=has_draft, seed=SEED, constraint=constraint)


def _row(seed=0):
    return np.random.default_rng(seed).normal(0, 2, V).astype(np.float32)


def test_the_draft_phase_is_the_generations_and_defined_once():
    assert issubclass(Generation, drafting.DraftPhase)
    for name in PHASE:
        assert name in drafting.DraftPhase.__dict__ and name not in Generation.__dict__, name
        assert getattr(Generation, name) is drafting.DraftPhase.__dict__[name]
    assert "__init__" not in drafting.DraftPhase.__dict__  # its state is the generation's


def test_the_first_draft_call_feeds_the_pending_chain_and_later_ones_each_frontier():
    gen = _gen(DraftParams(method="chain"))
    gen.draft_pending = [1, 2, 3]  # the draft has not seen them; 3 is the root
    tree = DraftTree.with_root(3)
    index = {}
    first = gen._draft_call(tree, [0], index)
    assert isinstance(first, Decode)
    assert first.tokens == [1, 2, 3] and first.parents == [-1, 0, 1]
    assert first.want.tolist() == [False, False, True]  # a row for the root only
    assert index == {0: 2}
    tree.set_draws(0, np.array([4, 5]), None)
    tree.add_children(0, {4: 0.5, 5: 0.5})  # nodes 1, 2
    level = gen._draft_call(tree, [1, 2], index)
    assert level.tokens == [4, 5] and level.parents == [2, 2] and level.want is None  # every row wanted
    assert index == {0: 2, 1: 3, 2: 4}
    # a certain node (3, below 1) the draft never evaluated goes in with the frontier node below it
    tree.set_draws(1, np.array([6]), None)
    tree.add_children(1, {6: 1.0})
    tree.set_draws(3, np.array([7]), None)
    tree.add_children(3, {7: 1.0})
    deeper = gen._draft_call(tree, [4], index)
    assert deeper.tokens == [6, 7] and deeper.parents == [3, 5] and deeper.want.tolist() == [False, True]
    assert index[3] == 5 and index[4] == 6


@pytest.mark.parametrize("method,k,taken", [("chain", 1, 1), ("resispec", 3, 3), ("rrs", 3, 3)])
def test_a_drafted_node_takes_its_k_uniforms_from_the_request_stream(method, k, taken):
    gen = _gen(DraftParams(method=method, draws=k))
    d = gen._draw(DraftTree.with_root(3), 0, _row())
    assert len(d.draws) == k and d.lookup == ()
    ids, probs = d.q
    assert set(d.draws.tolist()) <= set(ids.tolist()) and probs.sum() == pytest.approx(1.0)
    # the next uniform the request draws is the one after the node's
    assert gen.uniforms.one() == np.random.default_rng(SEED).random(taken + 1)[taken]


def test_a_greedy_node_takes_the_drafts_top_k_and_no_uniform():
    gen = _gen(DraftParams(method="resispec", draws=3), temperature=0.0)
    row = _row()
    d = gen._draw(DraftTree.with_root(3), 0, row)
    assert d.draws.tolist() == np.argsort(-row)[:3].tolist() and d.q is None
    assert gen.uniforms.one() == np.random.default_rng(SEED).random()


class _OneToken:
    """A constraint state whose mask allows token ``allow`` alone (a packed bitmask)."""

    def __init__(self, allow):
        self.allow = allow
        self.asked = []

    def mask(self, path):
        self.asked.append(tuple(path))
        out = np.zeros(1, np.int32)
        for x in self.allow:
            out[0] |= np.int32(1 << x)
        return out

    def is_stopped(self):
        return False


def test_a_position_the_mask_leaves_one_token_is_certain_and_draws_nothing():
    gen = _gen(DraftParams(method="resispec", draws=3), constraint=_OneToken([5]))
    tree = DraftTree.with_root(3)
    for d in (gen._certain_draw(tree, 0), gen._draw(tree, 0, _row()), gen._lookup_draw(tree, 0),
              gen._certain(tree)(0)):
        assert d.draws.shape == (0,) and d.q is None and d.weight == {5: 1.0} and d.lookup == (5,)
    assert gen.constraint.asked == [()]  # one mask per path and step, shared
    assert gen.uniforms.one() == np.random.default_rng(SEED).random()  # no uniform spent
    two = _gen(DraftParams(method="resispec", draws=3), constraint=_OneToken([4, 5]))
    assert two._certain_draw(DraftTree.with_root(3), 0) is None
    assert _gen(DraftParams(method="chain"))._certain(tree) is None  # no constraint: no callback


def _finished(steps):
    with pytest.raises(StopIteration) as done:
        next(steps)
    return done.value.value


def test_a_lookup_step_follows_the_context_and_calls_no_draft():
    prompt = [1, 2, 3, 4] * 4 + [1, 2]
    gen = _gen(DraftParams(method="chain", lookup=True, use_draft=False, depth=4, budget=8), prompt=prompt,
               has_draft=False)
    tree, index = _finished(gen._grow_tree("lookup", 8, 0))
    assert index is None and len(tree) > 1
    deepest = max(range(len(tree)), key=lambda n: tree.depth[n])
    assert list(tree.path_tokens(deepest)) == [3, 4, 1, 2][:tree.depth[deepest]]
    assert gen._propose(tree, 0)[0][0] == 3  # what followed "1 2" in the context
    assert gen._tail_draw(tree, 0).lookup == (3,)
    tree, index = _finished(gen._grow_tree("lookup", -1, 0))
    assert len(tree) == 1 and index is None  # no room: the root alone
