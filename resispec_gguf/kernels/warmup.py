"""Compile every kernel entry a generation calls, before the first reply needs it.

Numba compiles (or loads from its cache) one version of a kernel per argument types, at the
first call with them; a type first seen in a reply costs seconds there.  The public wrappers
fix every type (logits: float32 read-only, as the backend's rows; every other array read-only
C-contiguous through ``arrays.frozen``, ids and draws int64, probabilities and uniforms
float64; scalars: Python int/float), so calling each entry once covers every reply.  The
tests check it: after ``Engine.prepare`` no kernel gains a signature during a generation of
any method.
"""

from __future__ import annotations

import numpy as np

from .acceptance import acceptance_profile, draw_chances, overlap, values_at
from .draws import sample_dense, sample_iid, sample_iid_q, sample_sparse, sample_without_replacement
from .masks import mask_logits
from .sampling import probs_dense, probs_sparse, token_logprob
from .verify import verify

__all__ = ["warm_ups"]

_NO_DRAWS = np.empty(0, np.int64)


def warm_ups() -> list:
    """One callable per group of kernel entries, each calling the functions the generation
    calls, with the same argument types."""
    row = np.array([2.0, 1.0, 0.0, -np.inf, -1.0], np.float32)
    row.flags.writeable = False  # as backend.LogitsRows gives it
    wide = np.linspace(-3.0, 3.0, 8192).astype(np.float32)  # a vocabulary of many blocks (topk._scan_top)
    wide.flags.writeable = False

    def distributions():
        probs_dense(row, 0.7, 2, 0.9, 0.05)  # the target's p (a plain softmax needs no kernel)
        probs_sparse(row, 0.7, 2, 0.9, 0.05)  # ... and sparse
        probs_sparse(wide, 0.7, 2, 0.9, 0.05, 3)
        probs_sparse(row, 0.7, 0, 0.9, 0.05, 3)  # the draft's q
        probs_sparse(row, 1.0, 0, 1.0, 0.0, 2)  # greedy: the draft's top-K
        token_logprob(row, 1, 2)  # logprobs with their top tokens
        mask_logits(row, np.array([-1], np.int32))  # a constraint's mask (int32 words, as llguidance's)

    def draws():
        ids, probs = probs_sparse(row, 1.0)
        sample_dense(probs_dense(row, 1.0, 3), 0.5)
        sample_sparse(ids, probs, 0.5)
        sample_iid(ids, probs, np.full(2, 0.5))
        sample_iid_q(ids, probs, np.full(2, 0.5))
        acceptance_profile(values_at((ids, probs), ids), probs, np.array([1, 2], np.int64))  # auto: every arm's
        acceptance_profile(values_at(probs_dense(row, 1.0), ids), probs, np.array([1], np.int64))
        draw_chances("resispec", values_at((ids, probs), ids), ids, probs, np.array([0, 0], np.int64))
        values_at((ids, probs), ids)
        overlap((ids, probs), ids, probs)  # auto learns a chain's acceptance on a sparse p
        sample_without_replacement(ids, probs, np.full(2, 0.5))
        sample_iid_q(ids[1:], probs[1:] / probs[1:].sum(), np.full(2, 0.5))  # q less a node's candidates

    def verification():
        p = probs_dense(row, 1.0, 3)
        ids, probs = probs_sparse(row, 1.0)
        sparse_p = probs_sparse(row, 1.0, 3)
        for method in ("chain", "specinfer", "rrs", "resispec"):
            sample = sample_without_replacement if method == "rrs" else sample_iid
            draws = sample(ids, probs, np.full(1 if method == "chain" else 2, 0.5))
            for target in (p, sparse_p):
                verify(method, target, (ids, probs), draws, np.full(len(draws) + 1, 0.5))
                verify(method, target, (ids, probs), draws, np.full(len(draws) + 2, 0.5), 4)
                verify(method, target, None, _NO_DRAWS, np.full(2, 0.5), 4)  # lookup only

    return [distributions, draws, verification]
