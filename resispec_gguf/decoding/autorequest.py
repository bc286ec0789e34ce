"""``auto`` for one request: the object a ``Generation`` holds when ``method="auto"``.

``Auto`` wraps the request's ``autotune.AutoTuner`` (which chooses each step's plan from
the cost curves and what it has learnt) and is the generation's view of it: a plan per step
(``choose``), a score for each candidate (``weights``, ``lookup_worth``: the scorer
``candidates.FixedScores`` stands for under the fixed methods), and the hooks through which
each verified node and step teaches the tuner and its ``Calibration`` (``observe_node``,
``step_observed``, ...).  Its own draws (``_shadow_draws``) come from a side generator,
never from the request's stream.

No model calls here, and nothing that steers a choice by the clock.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..kernels import sampling
from ..kernels.verify import acceptance_profile, draw_chances
from .autotune import CATCH_UP_HORIZON, AutoTuner
from .candidates import layout
from .seeding import side_stream
from .stepplan import Background, StepPlan

__all__ = ["Auto"]

# auto learns every draft arm's acceptance exactly at a drafted node whose q has at most this
# many tokens (a sort of q's support); past it, from the outcomes of the arm that ran
_PROFILE_SUPPORT = 4096


class Auto:
    """``auto`` for one request, as the generation sees it: a plan per step, a score for each
    candidate, and hooks that tell it what each verified node and step showed.  What it
    learns from them (acceptance per arm, the calibration of its guesses) stays in here.

    ``seed``, ``key``: the request's (``seeding``); auto's own learning draws come from a side
    generator made from them, never from the request's stream, so the output's law is
    untouched.
    """

    def __init__(self, tuner: AutoTuner, seed: int, key: tuple[int, ...] | None = None):
        self.tuner = tuner
        self.seed = seed
        self.key = key
        self._side_rng = None

    @property
    def drafts(self) -> bool:
        """Whether any of its steps may call the draft model (``AutoTuner.drafts``)."""
        return self.tuner.drafts

    @property
    def lazy_start(self) -> bool:
        """Whether the draft may skip the prompt at the start (``AutoTuner.lazy_start``)."""
        return self.tuner.lazy_start

    def choose(self, pending: int, forced: int = 0, remaining: int = CATCH_UP_HORIZON,
               stale: bool = False, copy: Sequence[float] = ()) -> StepPlan | None:
        """The next step's plan, None for a plain step (``AutoTuner.choose``)."""
        return self.tuner.choose(pending, forced, remaining, stale, copy)

    def share_step(self, background: Background | None) -> None:
        """The next plans grow their trees within a step that also serves the requests
        ``background`` describes (None: alone).  Only how far a tree grows changes; the
        arm's rates stay counted as if alone."""
        self.tuner.background = background

    def record_time(self, plan: StepPlan | None, seconds: float, context: int = 0) -> None:
        self.tuner.record_time(plan, seconds, context)

    def observe_in_step(self, plan: StepPlan | None, rows: int, draft_calls: int) -> None:
        """A step of ``plan`` beside other requests held ``rows`` target rows (its root
        included) over ``draft_calls`` draft calls: the arm's width there, for the next
        shared steps' choice of arm (``AutoTuner.in_step_case``)."""
        if plan is not None and plan.background is not None and plan.arm in self.tuner.arms and draft_calls:
            self.tuner.arms[plan.arm].observe_width((rows - 1) / draft_calls)

    def summary(self) -> str:
        return self.tuner.summary()

    # ------------------------------------------------------------------ scores

    def weights(self, qx: dict, fixed: list, k: int) -> tuple[dict, dict]:
        """Score factors of a node's candidates (estimated chances of acceptance) and the
        first guess of each draw's chance (kept with the node for ``observe_node``).

        A reached node has a candidate accepted with the chance its arm learnt
        (``AutoTuner.accept``): the first guess shares it among the distinct draws in
        proportion to q (the draft's guess at p), less what the deterministic candidates
        ``fixed`` (``[(token, bin)]``), tried first, take (their bins' learnt chances); the
        calibration then corrects each guess by what guesses like it came to."""
        cal = self.tuner.calibration
        total = sum(qx.values())
        chances = [cal.lookup(b) for _, b in fixed]
        look = min(sum(chances), 0.99)
        share = self.tuner.accept * (1.0 - look) / total if total > 0.0 else 0.0
        guess = {x: q * share for x, q in qx.items()}
        w = {x: cal.draft(g, k) for x, g in guess.items()}
        for (x, _), c in zip(fixed, chances):
            w[x] = min(1.0, c + w.get(x, 0.0))
        return w, guess

    def lookup_worth(self, fixed: list, probs) -> list:
        """A draft node's deterministic candidates (checked before the draws) are kept only
        while each one's bin is accepted at least as often as the draws would have one
        accepted (the arm's acceptance; known before anything is drawn): a poor guess would
        only split the accepted path between two branches.  The bins a source keeps apart
        (``candidates.base``: the memory's candidates) are left to the nodes without draws
        (lookup trees and tails): beside a draft's draws, on the Markov pairs of the tests,
        the memory's took the accepted path away from the draft's better children (0.94 of
        the best fixed setting instead of 1.0)."""
        if not fixed or probs.shape[0] == 0:
            return fixed
        cal, accept, apart = self.tuner.calibration, self.tuner.accept, layout().apart
        return [(x, b) for x, b in fixed if b not in apart and cal.lookup(b) >= accept]

    # ------------------------------------------------------------------ observations

    def observe_lookup(self, b: int, p_x0: float) -> None:
        """A plain step's deterministic candidate (in bin ``b``) had chance ``p_x0``."""
        self.tuner.calibration.observe_lookup(b, p_x0)

    def observe_fixed(self, fixed: list, p_of) -> None:
        """A node's deterministic candidates ``[(token, bin)]`` (as proposed, kept or not)
        had the chances ``p_of(token)``: each bin learns its own, and the node's whole set
        its sum (what a level of a tree without draft rows is worth)."""
        cal = self.tuner.calibration
        total = 0.0
        for x, b in fixed:
            c = p_of(x)
            cal.observe_lookup(b, c)
            total += c
        cal.observe_node_lookup(min(total, 1.0))

    def step_observed(self, plan: StepPlan, tree, n_emitted: int) -> None:
        """A speculative step of ``plan`` over ``tree`` emitted ``n_emitted`` tokens."""
        self.tuner.observe_step(plan, n_emitted, plan.cost)
        inner = [len(tree.candidates(i)) for i in range(len(tree)) if tree.expanded(i)]
        if inner:  # for the next steps' plans (never this step's: see tree.py's pruning rule)
            self.tuner.observe_children(plan, sum(inner) / len(inner))

    def observe_node(self, tree, node: int, tok: int, accepted: bool, is_lookup: bool, p, p_of, method: str,
                     greedy: bool) -> None:
        """How a verified node fared: whether a candidate was accepted (the arm's
        acceptance) and, when the draws were reached, how each draw's first guess
        (``weights``) came out.  Where a chance is known exactly it is learnt instead of a
        0/1 outcome (less noise), whatever the step's shape: p(x0) for the node's lookup
        proposal (kept or not), min(1, p'/q) for a chain's single draw, and at a drafted
        node sum(min(p, q)), the chance a chain's draw would have passed there (greedy:
        whether the draft's top token is the target's)."""
        tuner = self.tuner
        cal = tuner.calibration
        guess, kept, proposed = tree.info[node]
        if proposed:  # learnt whether or not the candidates were kept (``lookup_worth``)
            self.observe_fixed(proposed, p_of)
        fixed = tree.lookup[node]
        qx = tree.q[node]
        pv = sampling.values_at(p, qx[0]) if qx is not None and p is not None and len(qx[0]) <= _PROFILE_SUPPORT else None
        if guess and not is_lookup:  # the draws were reached, against p without the candidates
            draws = tree.draws[node]
            if pv is not None and method in ("chain", "resispec"):
                # each distinct draw's chance of being the one accepted, given the draws as drawn
                pq = pv
                if fixed:
                    p0 = sum(p_of(x) for x in fixed)
                    pq = np.where(np.isin(qx[0], fixed), 0.0, pv / (1.0 - p0)) if p0 < 1.0 else np.zeros_like(pv)
                chance = _chance_by_token(method, pq, qx, draws)
                for x, g in guess.items():
                    if x not in fixed:
                        cal.observe_draft(g, chance.get(x, 0.0), len(draws))
                self._shadow_draws(len(draws), kept, pq, qx)
            else:
                for x, g in guess.items():
                    if x not in fixed:
                        cal.observe_draft(g, float(accepted and tok == x), len(draws))
        if pv is not None and tuner.exact_ks.size:
            # every draft arm's acceptance and width here, exactly (the chain's included)
            tuner.observe_draft_node(*acceptance_profile(pv, qx[1], tuner.exact_ks))
            return
        if qx is not None and p is not None:
            tuner.observe_chain(sampling.overlap(p, *qx))
        elif greedy and len(tree.draws[node]):
            tuner.observe_chain(p_of(int(tree.draws[node][0])))
        if not len(tree.draws[node]) and tuner.current in tuner.arms and tuner.arms[tuner.current].k:
            return  # a lookup tail in a draft step: its chance is its bin's, learnt above
        tuner.observe_node(accepted)

    def _shadow_draws(self, k_drawn: int, kept: list, pq, qx) -> None:
        """At a reached drafted node, what each other draft arm's K draws would have made of
        it: K draws from q on the side generator, guessed as ``weights`` guesses and scored
        by their exact chances, so that every K's calibration learns at every node, not only
        the K that ran."""
        tuner, cal = self.tuner, self.tuner.calibration
        if self._side_rng is None:
            self._side_rng = side_stream(self.seed, self.key)
        look = min(sum(cal.lookup(b) for _, b in kept), 0.99)
        fixed = {x for x, _ in kept}
        for k, accept in tuner.draft_accepts():
            if k == k_drawn:
                continue
            draws, qd = sampling.sample_iid_q(qx[0], qx[1], self._side_rng.random(k))
            qs = dict(zip(draws.tolist(), qd.tolist()))
            total = sum(qs.values())
            if total <= 0.0:
                continue
            chance = _chance_by_token("chain" if k == 1 else "resispec", pq, qx, draws)
            share = accept * (1.0 - look) / total
            for x, q in qs.items():
                if x not in fixed:
                    cal.observe_draft(q * share, chance.get(x, 0.0), k)


def _chance_by_token(method: str, pq, qx, draws) -> dict[int, float]:
    """Each distinct draw's chance of being the one the verifier accepts (``draw_chances``
    summed over its repeats), given the draws as drawn."""
    chance: dict[int, float] = {}
    for x, c in zip(draws.tolist(), draw_chances(method, pq, qx[0], qx[1], draws).tolist()):
        chance[x] = chance.get(x, 0.0) + c
    return chance
