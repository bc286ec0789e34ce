"""A hybrid model (``backend.recurrent``) through the engine beyond one plain request: the
joint law under a JSON-schema constraint on the tiny ``lfm2``, two ``--parallel`` slots
stepped together, and pairs that mix the memory kinds (a hybrid draft for an attention
target and the reverse)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from law_harness import check_law
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.engine import Engine
from resispec_gguf.kernels import sampling
from tiny_gguf import EOS_ID, write_tiny_llama
from tiny_recurrent import write_tiny_lfm2

# an enum whose values share forced stretches ('"', "a b ") between free choices
ENUM = {"enum": ["a b c d", "a b x", "ay", "q r"]}
PROMPT = "ab ab ab ab"
N_LAW = 6  # tokens whose joint law is tested


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("recurrent-engine")
    return {"lfm2": write_tiny_lfm2(d / "lfm2.gguf"),
            "lfm2-draft": write_tiny_lfm2(d / "lfm2d.gguf", seed=1, base_seed=0, noise=0.15),
            "llama": write_tiny_llama(d / "llama.gguf"),
            "llama-draft": write_tiny_llama(d / "llamad.gguf", seed=1, base_seed=0, noise=0.15)}


def _load(paths, target, draft, **settings):
    return Engine.load(str(paths[target]), str(paths[draft]), n_ctx=256, n_threads=1, flash_attn=False,
                       progress=False, memory_size=0, **settings)


@pytest.fixture(scope="module")
def hybrid(paths):
    with _load(paths, "lfm2", "lfm2-draft") as e:
        yield e


def _constrained_law(engine, grammar, prompt, n):
    """The exact law of the first ``n`` tokens at T 1 under ``grammar`` (an end token ends a
    sequence early, and counts as its last entry; where the grammar has stopped, only an
    end token may follow, as ``Generation.plan`` has it)."""
    law, done = {(): 1.0}, {}
    for _ in range(n):
        nxt = {}
        for seq, pr in law.items():
            state = grammar.start()
            state.advance(list(seq))
            if state.is_stopped():
                done[seq + (EOS_ID,)] = pr
                continue
            row = engine.reference_logits(prompt + list(seq))[-1]
            p = sampling.probs_dense(sampling.mask_logits(row, state.mask(())), 1.0)
            for t in np.flatnonzero(p).tolist():
                (done if t == EOS_ID else nxt)[seq + (t,)] = pr * float(p[t])
        law = nxt
    return {**law, **done}


@pytest.mark.parametrize("method", ["chain", "specinfer", "rrs", "resispec", "auto"])
def test_the_joint_law_under_a_json_schema_is_exact_on_the_hybrid(hybrid, method):
    grammar = hybrid.compile_constraint(json_schema=ENUM)
    prompt = hybrid.text_tokens("Pick one")
    law = _constrained_law(hybrid, grammar, prompt, N_LAW)
    assert len(law) >= 5  # replies and their tokenizations, not one forced path
    sp = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=N_LAW)
    counts = Counter()
    for seed in range(400):
        res = hybrid.generate(prompt, sp.replace(seed=seed), DraftParams(method=method), constraint=grammar)
        end = (EOS_ID,) if res.finish_reason == "eos" and len(res.tokens) < N_LAW else ()
        counts[tuple(res.tokens[:N_LAW]) + end] += 1
    check_law(counts, law, f"lfm2/json/{method}")


CONCURRENT = [("ab ab ab ab", DraftParams(method="auto")), ("ba ba ab", DraftParams(method="chain"))]


def test_two_parallel_slots_on_the_hybrid_give_what_each_gives_alone(paths, hybrid):
    """Two greedy requests stepped together on a two-slot hybrid engine (each slot's chain in
    its own sequence, one target decode for both) give token for token what each gives on a
    one-slot engine."""
    sp = SamplingParams(temperature=0.0, max_tokens=24)
    alone = [hybrid.generate(p, sp, dp) for p, dp in CONCURRENT]
    with _load(paths, "lfm2", "lfm2-draft", n_slots=2) as slotted:
        batch = slotted.batch(chunk=4)
        reqs = [batch.admit(slotted.generation(p, sp, dp)) for p, dp in CONCURRENT]
        assert sorted(r.slot for r in reqs) == [0, 1]
        while batch.busy:
            for r in batch.step():
                r.take()
        for r, want in zip(reqs, alone):
            assert r.gen.out == want.tokens and r.gen.finish_reason == want.finish_reason
        assert sum(r.gen.stats.tree_nodes for r in reqs) > 0  # they speculated


@pytest.mark.parametrize("target,draft", [("llama", "lfm2-draft"), ("lfm2", "llama-draft")])
@pytest.mark.parametrize("method", ["chain", "specinfer", "rrs", "resispec", "auto"])
def test_a_pair_of_mixed_memory_kinds_gives_plain_greedy_output(paths, target, draft, method):
    """A hybrid draft drafting one chain for an attention target (which may verify a tree),
    and an attention draft for a hybrid target (which verifies one chain)."""
    sp = SamplingParams(temperature=0.0, max_tokens=24, seed=1)
    with _load(paths, target, draft) as e:
        plain = e.generate(PROMPT, sp, DraftParams(method="none")).tokens
        res = e.generate(PROMPT, sp, DraftParams(method=method))
        assert res.tokens == plain
        if method != "auto":
            assert res.stats.tree_nodes > 0
