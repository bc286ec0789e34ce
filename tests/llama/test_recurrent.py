"""Recurrent and hybrid memory (``backend.recurrent``) on tiny ``lfm2`` (hybrid, snapshots)
and ``mamba2`` (recurrent, none) GGUFs: the kind and rollback the backend reports, a step's
chain undone to exactly the state a plain decode leaves, and through the engine greedy
output equal to plain decoding and the joint law of the first tokens."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from law_harness import check_law
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.engine import Engine
from resispec_gguf.kernels import sampling
from resispec_gguf.llama.backend import LlamaModel
from tiny_recurrent import write_tiny_lfm2, write_tiny_mamba2

TOKENS = [1, 50, 60, 70, 80, 90, 100, 110, 120]
PROMPT = "ab ab ab ab"


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("recurrent")
    return {"lfm2": write_tiny_lfm2(d / "lfm2.gguf"),
            "lfm2-draft": write_tiny_lfm2(d / "lfm2d.gguf", seed=1, base_seed=0, noise=0.15),
            "mamba2": write_tiny_mamba2(d / "mamba2.gguf"),
            "mamba2-draft": write_tiny_mamba2(d / "mamba2d.gguf", seed=1, base_seed=0, noise=0.15)}


def _model(path):
    return LlamaModel(path, n_ctx=256, n_batch=64, n_threads=1, n_seq_max=16, flash_attn=False)


@pytest.mark.parametrize("name,memory,rollback", [("lfm2", "hybrid", 8), ("mamba2", "recurrent", 0)])
def test_the_backend_reports_the_memory_and_its_rollback(paths, name, memory, rollback):
    m = _model(paths[name])
    try:
        assert (m.memory, m.rollback, m.max_chain) == (memory, rollback, rollback)
        assert m.describe()["memory"] == memory
        assert ("by snapshot rollback" in m.memory_text()) == (rollback > 0)
        # what llama.cpp reported when it made the context: the attention layer's KV cache
        # (none on mamba2) and the recurrent states with their snapshots
        assert (m.kv_bytes() > 0) == (name == "lfm2") and m.state_bytes() > 0
        assert m.describe()["state_bytes"] == m.state_bytes() and m.describe()["kv_bytes"] == m.kv_bytes()
    finally:
        m.close()


@pytest.mark.parametrize("name", ["lfm2", "mamba2"])
def test_a_rejected_tail_leaves_the_state_plain_decoding_leaves(paths, name):
    """A chain cut back (by snapshot on lfm2, by checkpoint and a second decode on mamba2),
    and a chain decoded one node per call (the draft's way) cut back: the next rows equal a
    plain decode's to 1e-4."""
    m = _model(paths[name])
    try:
        ref = m.logits_of_sequence(TOKENS)
        m.reset()
        m.sync_prefix(TOKENS[:4])
        m.decode([TOKENS[3], TOKENS[4], 200, 201], [-1, 0, 1, 2])
        m.commit([0, 1])
        rows = m.decode(TOKENS[5:9], [-1, 0, 1, 2])
        np.testing.assert_allclose(np.array([rows[i] for i in range(4)]), ref[5:9], atol=1e-4)
        m.commit([0, 1, 2])
        for tok, par in ((TOKENS[8], -1), (5, 0), (6, 1)):
            m.decode([tok], [par])
        m.commit([0])
        assert m.cached == TOKENS
        row = np.array(m.decode([9], [-1])[0])
        np.testing.assert_allclose(row, m.logits_of_sequence(TOKENS + [9])[-1], atol=1e-4)
        with pytest.raises(ValueError, match="one chain"):
            m.decode([7, 8, 9], [-1, 0, 0])
        assert m.sync_prefix(TOKENS[:5] + [33, 34]) == 0  # no going back: evaluated again
        assert m.cached == TOKENS[:5] + [33]
    finally:
        m.close()


@pytest.fixture(scope="module")
def engines(paths):
    out = {name: Engine.load(str(paths[name]), str(paths[name + "-draft"]), n_ctx=256, n_threads=1,
                             flash_attn=False, progress=False, memory_size=0) for name in ("lfm2", "mamba2")}
    yield out
    for e in out.values():
        e.close()


@pytest.mark.parametrize("name", ["lfm2", "mamba2"])
@pytest.mark.parametrize("method", ["chain", "specinfer", "rrs", "resispec", "auto"])
def test_greedy_output_equals_plain_decoding(engines, name, method):
    e = engines[name]
    sp = SamplingParams(temperature=0.0, max_tokens=24, seed=1)
    plain = e.generate(PROMPT, sp, DraftParams(method="none")).tokens
    res = e.generate(PROMPT, sp, DraftParams(method=method))
    assert res.tokens == plain
    if name == "mamba2":  # no rollback: plain decoding, whatever the method
        assert res.stats.tree_nodes == 0


def _law(engine, prompt, sp, n=2):
    """The exact law of the first ``n`` tokens under ``sp``'s filters (``sampling.probs_sparse``)."""
    law = {(): 1.0}
    for _ in range(n):
        nxt = {}
        for seq, pr in law.items():
            row = engine.reference_logits(prompt + list(seq))[-1]
            ids, probs = sampling.probs_sparse(row, sp.temperature, sp.top_k, sp.top_p, sp.min_p)
            for t, q in zip(ids.tolist(), probs.tolist()):
                nxt[seq + (t,)] = pr * q
        law = nxt
    return law


@pytest.mark.parametrize("temp", [0.6, 1.0])
@pytest.mark.parametrize("method", ["chain", "specinfer", "rrs", "resispec", "auto"])
def test_the_joint_law_is_exact_on_the_hybrid(engines, method, temp):
    e = engines["lfm2"]
    prompt = e.text_tokens(PROMPT)
    # three tokens: a step's chain ends before the third often enough that a rolled-back state reads on
    sp = SamplingParams(temperature=temp, top_k=4, max_tokens=3)
    law = _law(e, prompt, sp, n=3)
    counts = Counter(tuple(e.generate(prompt, sp.replace(seed=s), DraftParams(method=method)).tokens[:3])
                     for s in range(600))
    check_law(counts, law, f"lfm2/{method}/T{temp}")
