"""``method="auto"``: per step, plain decoding or a tree grown only as far as it pays.

What steers it, all fixed for a given request, seed and machine (no wall-clock reading
steers a choice, so the same seed gives the same output):

* **Costs** — ``CostCurve``: the measured seconds of one decode of n rows, per model, on this
  machine and settings (measured once, cached on disk by the engine).
* **Values** — ``Calibration``: the chance that the verifier accepts a candidate, learnt
  online (with decay) from this request's verified nodes, by the candidate's draft
  probability q, or by the copy run a context-lookup candidate would continue.  A node's score is
  the product of those chances along its path: the estimated probability that its token is
  emitted as an accepted candidate.  A step yields ``E = 1 + sum of node scores`` tokens on
  average and costs ``T = draft calls + target(1 + nodes) + overhead``, where the overhead
  counts the host work on every logits row it processes (measured once per vocabulary).

Growth (``StepPlan.width`` / ``StepPlan.leaves``, called by ``tree.grow`` before a level
draws): take the new children best-first and expand one while its marginal value per
marginal cost beats the step's current ``E / T``.  Expanding c is worth about
``score(c) * a`` tokens (``a``: the decayed acceptance rate per verified node) and costs one
more draft row plus a target row for its child.  Leaves are kept by the same test.  This is
dynamic depth and width in one rule (SpecDec++ / EAGLE-2 style), bounded by the user's
``draws``/``depth``/``budget``, which act as upper bounds.

Plain or speculate (``AutoTuner.choose``): every request starts with a speculative probe.
After each speculative step the tuner compares the tokens it realised per *predicted*
second (decayed) with plain decoding's predicted speed.  When speculation loses, it decodes
plain for a stretch that doubles after each losing probe (4, 8, 16, ... tokens) and then
probes again, unless a chain at the acceptance learnt so far could not beat plain decoding
(``expected_case``): then it waits the next stretch out as well.  A winning probe resets
the stretch.  Lookup-only trees (no draft model calls)
are tried the same way, so a step uses the draft model, the lookup, both, or neither.
An arm not yet run is projected by ``expected_case`` on the footing of the best arm that
ran (``footing``: how far that arm's rate beat its own projection): under a constraint the
rates count the forced and certain tokens a step takes without a draft call, which any
arm's steps take alike and the chain model leaves out, so a tree whose learnt acceptance
beats the chain's is still probed after a chain probe those tokens lifted.

Beside other requests (``batch``, which sets ``AutoTuner.background``): the arms' rates are
those of a request alone, where a step's rows and draft calls are its own; in a shared step
they cost what they add to the whole step.  There the arm, or plain decoding, is the one
with the best projected tokens/s of the whole step (``in_step_case``: the learnt acceptances,
a tree's rows per level as its trees held them beside others, the step's levels and the
others' rows), without probes or back-off; alone, a request chooses as above.

Grammar steps: where the constraint forces the next tokens at the step's root (a key, the
punctuation after it), a draft call would only predict what is already known.  Then a
"grammar" step (no draft call: a chain of the forced candidates, continued by lookup ones)
runs whenever its projected rate (``forced_case``: the forced bin's learnt acceptance along
the forced run, scaled by the tokens its past steps realised against their projection)
beats plain decoding and every draft arm that has run (after the first probe).  The forced
run is a function of the committed tokens, known before the step draws, like everything
else that steers a choice.

A target on recurrent memory (``max_chain``: it evaluates one chain it can undo, of at most
that many nodes) gets chains only: no tree arm, depth and budget within the chain
(``chain_limits``), and plans that expand and weigh one node a level (``StepPlan.chain``),
so what they price is the chain the target evaluates.

A draft of another vocabulary (``candidates.textdraft``) is the "text" arm: a lookup tree
whose chain of candidates the draft writes first, for seconds its own curve predicts
(``text``: ``TEXT_SYNC_ROWS`` re-read, then a row per token).  How long a chain to ask for
(``text_ask``: the best depth at the acceptance its bins have shown) and whether to ask at
all (the arm's probes and back-off, as above) are weighed like a draft arm's calls; at any
other step the draft is not called.  All of it is fixed before the step draws.

What each arm is priced at (its ``Arm`` figures, ``best_case``, ``expected_case``,
``forced_case``, ``in_step_case``, the text draft's ``text_s`` and ``text_ask``) is ``arms``'
(``ArmPrices``, which ``AutoTuner`` inherits); the choice and the learning are here.  No
model calls here: the cost curves are measured by ``costs``.  The per-request object the
generation holds (``Auto``: plans, candidate scores, what each verified node teaches the
tuner) is in ``autorequest``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..config import DraftParams
from .arms import TEXT_SYNC_ROWS, Arm, ArmPrices, draws_of, text_seconds  # noqa: F401  (TEXT_SYNC_ROWS: tests')
from .calibration import FORCED_BIN, Calibration, lookup_bin  # noqa: F401  (lookup_bin: the generation's)
from .costs import CostCurve, cost_table
from .stepplan import TABLE_ROWS, Background, StepPlan

# pending draft tokens past which the draft is brought up to date by one prefill (a re-sync)
# instead of being fed them as a chain in the step's first draft call
DRAFT_CATCH_UP = 32
# output tokens a catch-up is judged over, at most (what it costs must be won back within them)
CATCH_UP_HORIZON = 256
# the learnt chance from which a leading lookup candidate at a step's root is a copy under way,
# whose chain ``choose`` weighs node by node (``_copy_step``)
COPY_SURE = 0.9


class AutoTuner(ArmPrices):
    """Per request: choose plain decoding or a ``StepPlan`` for each step (module docstring)."""

    # the draft may be left without the prompt at the start: ``choose`` brings it up to date
    # when a draft step first pays for it (``catch_up_pays``)
    lazy_start = True

    def __init__(self, target: CostCurve, draft: CostCurve | None, limits: DraftParams, *,
                 has_draft: bool = True, overhead_s: float = 0.0005, row_s: float = 0.0, decay: float = 0.95,
                 margin: float = 1.0, max_chain: int | None = None, text: CostCurve | None = None):
        self.max_chain = max_chain
        if max_chain is not None:  # ``chain_limits``: chains the target can undo, no tree arm
            limits = chain_limits(limits, max_chain)
        self.target, self.draft, self.text = target, draft, text
        self.target_s, self.draft_s = cost_table(target, TABLE_ROWS), cost_table(draft, TABLE_ROWS)
        # a draft of another vocabulary (``text``: its curve): the seconds of its chain by length
        self.text_s = text_seconds(text, max(1, int(limits.max_depth)))
        self.row_s = row_s
        self.limits = limits
        self.overhead_s = overhead_s
        self.decay = decay
        self.margin = margin
        self.calibration = Calibration()
        self.plain_rate = 1.0 / (target(1) + overhead_s + row_s)
        # an arm that cannot beat plain decoding even if every candidate were accepted is
        # never tried: on such a machine auto is plain decoding, probes included
        kinds = ["lookup"] if text is None else ["text", "lookup"]
        if has_draft and draft is not None:
            kinds = ["chain"] + [f"tree{k}" for k in sorted({min(int(limits.draws), 2), min(int(limits.draws), 4)})
                                 if k > 1] + kinds
        if max_chain == 0:  # nothing can be undone: plain decoding
            kinds = []
        self.arms = {k: Arm(k=draws_of(k)) for k in kinds
                     if self.best_case(k) > self.plain_rate * max(margin, 1.05)}
        # a text draft's probe reads the whole text so far: tried only where it pays at its prior
        if "text" in self.arms and self.expected_case("text") <= self.plain_rate * max(margin, 1.05):
            del self.arms["text"]
        # grammar steps (module docstring): chosen by the forced run, not probed like an arm
        self.grammar = Arm() if kinds and self.best_case("lookup") > self.plain_rate * max(margin, 1.05) else None
        # the draft arms' K, in the order ``observe_draft_node`` takes their figures
        self.exact_ks = np.array([a.k for a in self.arms.values() if a.k], np.int64)
        self.current: str | None = None  # the arm of the step under way
        self.background: Background | None = None  # the step's other requests (``Auto.share_step``)
        self.last_choice = "none"
        self.reason = "start: probe"
        self.lost = 0  # speculative steps whose arm then did not beat plain decoding or another arm
        # per arm ("none" for plain): [steps, predicted seconds, measured seconds], for the
        # user's eyes and the engine's ``costcheck.CurveCheck`` (never this request's choices)
        self.timing: dict[str, list] = {}
        self.check = None  # the engine's CurveCheck, told each step run alone
        self.check_scale = 1.0  # its scale when this tuner's curves were taken
        self.check_context = (0.0, 0)  # (alpha, context) its target curve was raised by (``CurveCheck``)

    @property
    def drafts(self) -> bool:
        """Whether a step may call the draft model: on a machine where no draft arm could
        beat plain decoding even with every candidate accepted, none can, and the draft need
        not even be given the prompt.  (The text draft is no such draft: ``text_ask``.)"""
        return any(name not in ("lookup", "text") for name in self.arms)

    @property
    def accept(self) -> float:
        """The acceptance per node of the arm under way (or the best arm's)."""
        if self.current in self.arms:
            return self.arms[self.current].accept
        return max((a.accept for a in self.arms.values()), default=0.6)

    # -------------------------------------------------------------- choice per step

    def catch_up_s(self, pending: int) -> float:
        """Predicted seconds for the draft to read ``pending`` tokens it lacks, in chunks of
        ``TABLE_ROWS``."""
        if self.draft is None:
            return float("inf")
        full, rest = divmod(int(pending), TABLE_ROWS)
        return full * self.draft(TABLE_ROWS) + self.draft(rest)

    def catch_up_pays(self, pending: int, remaining: int) -> bool:
        """Whether bringing a draft ``pending`` tokens behind up to date pays within the
        reply's next ``min(remaining, CATCH_UP_HORIZON)`` tokens: the best draft arm's rate
        (its learnt rate if it ran, else its projection on the footing of what ran) against
        the best without the draft (plain, or the lookup arm's learnt rate), the seconds it
        would save there against ``catch_up_s``."""
        drafted = {n: a for n, a in self.arms.items() if n not in ("lookup", "text")}
        if not drafted:
            return False
        lookup = self.arms.get("lookup")
        without = max(self.plain_rate * self.margin, lookup.rate if lookup is not None and lookup.steps else 0.0)
        best = max(a.rate if a.steps else self.expected_case(n, 1) * self.footing() for n, a in drafted.items())
        if best <= without:
            return False
        horizon = min(max(int(remaining), 0), CATCH_UP_HORIZON)
        return horizon * (1.0 / without - 1.0 / best) > self.catch_up_s(pending)

    def choose(self, pending: int = 1, forced: int = 0, remaining: int = CATCH_UP_HORIZON,
               stale: bool = False, copy: Sequence[float] = ()) -> StepPlan | None:
        """The next step's plan, or None for a plain step.  ``forced``: the tokens the
        constraint forces at the step's root (0: none, or no constraint).  ``copy``: the
        learnt chances of the lookup sources' leading candidates along their chain from the
        root, when the first is at least ``COPY_SURE`` (``Sources.leading_chain``): a copy
        under way is taken where it pays (``_copy_step``), as a forced run is.  ``pending``: the
        tokens the draft has not read; past ``DRAFT_CATCH_UP`` (a long plain stretch), or
        when the draft holds another sequence (``stale``: a lazy start), a draft step first
        brings it up to date, so draft arms are considered only
        where that pays within the ``remaining`` tokens the reply may still have
        (``catch_up_pays``), and a step of theirs is then planned from an up-to-date draft."""
        arms = self.arms
        if stale or pending > DRAFT_CATCH_UP:
            if not self.catch_up_pays(pending, remaining):
                arms = {n: a for n, a in self.arms.items() if n in ("lookup", "text")}
            pending = 1
        if forced and self.grammar is not None:
            plan = self._grammar_step(arms, pending, forced)
            if plan is not None:
                return plan
        if copy and "lookup" in arms and self.background is None:
            plan = self._copy_step(arms, pending, copy)
            if plan is not None:
                return plan
        if self.background is not None and arms:
            return self._choose_in_step(pending, arms)
        plan = self._first_probe(arms, pending)
        return plan if plan is not None else self._choose_alone(arms, pending)

    def _copy_step(self, arms: dict, pending: int, copy: Sequence[float]) -> StepPlan | None:
        """A lookup step along a copy under way (``choose``'s ``copy``), when its projection
        (``copy_case``) beats plain decoding and the rates the draft arms have shown; None
        otherwise, and before the first probe of a draft arm.  The lookup arm's average
        acceptance (``expected_case``) would wait for a long stretch of plain steps to lift
        it: this weighs the chain the step would grow, node by node, and the step grows no
        deeper than ``copy`` (the generation asks it as deep as ``copy_depth`` allows: twice
        the copy run so far, or deeper at no more cost)."""
        drafted = [a for n, a in arms.items() if n not in ("lookup", "text")]
        if drafted and not any(a.steps for a in drafted):
            return None
        rival = max([self.plain_rate * self.margin] + [a.rate for a in drafted if a.steps])
        promise = self.copy_case(copy)
        if promise > rival:
            return self._plan("lookup", pending, f"a copy under way: {promise:.2f} tokens/s > {rival:.2f}",
                              depth=len(copy))
        return None

    def _grammar_step(self, arms: dict, pending: int, forced: int) -> StepPlan | None:
        """A grammar step along the ``forced`` tokens, when its projection (``forced_case``,
        corrected by what its steps realised of theirs) beats plain decoding and what the
        draft arms have shown (their rates, waiting or not: a draft tree continues past the
        forced run, through the free tokens after it); None otherwise, and before any draft
        arm has run (the first probe goes first)."""
        drafted = [a for n, a in arms.items() if n != "lookup"]
        if drafted and not any(a.steps for a in drafted):
            return None
        rival = max([self.plain_rate * self.margin] + [a.rate for a in drafted if a.steps])
        g = self.grammar
        promise = self.forced_case(forced) * (g.real + g.PRIOR_TOKENS) / (g.expected + g.PRIOR_TOKENS)
        if promise > rival:
            return self._plan("grammar", pending, f"grammar forces {forced} tokens: {promise:.2f} tokens/s "
                                                  f"> {rival:.2f}")
        return None

    def _first_probe(self, arms: dict, pending: int) -> StepPlan | None:
        """A request alone: the probe of an arm not yet run, or None.  At the start the first
        arm (the chain: it learns the draft's acceptance exactly at every node) is probed
        once; every other only if what has been learnt promises that it beats what ran (else
        it waits, and is judged again when its wait runs out)."""
        ran = max([self.plain_rate * self.margin] + [a.rate for a in arms.values() if a.steps])
        first = next(iter(arms), None)
        for name, arm in arms.items():
            if arm.steps == 0 and not arm.due and arm.wait == 0:
                if name == first or self.expected_case(name, pending) * self.footing() > ran:
                    return self._plan(name, pending, f"probe {name}")
                arm.wait = arm.backoff  # judged again when its wait runs out
        return None

    def _choose_alone(self, arms: dict, pending: int) -> StepPlan | None:
        """A request alone, after ``_first_probe``: an arm that lost its last step waits a
        stretch (doubling after each loss) while the others, or plain decoding, run; then it
        is due to be tried again (``_reprobe``).  Otherwise the arm of the best rate that
        beats plain decoding runs, and the others wait for their next try."""
        for arm in arms.values():
            if arm.wait > 0:
                arm.wait -= 1
                arm.due = arm.wait == 0
        best, best_rate = None, self.plain_rate * self.margin
        for name, arm in arms.items():
            if arm.wait == 0 and not arm.due and arm.rate > best_rate:
                best, best_rate = name, arm.rate
        plan = self._reprobe(arms, pending, best_rate)
        if plan is not None:
            return plan
        for name, arm in arms.items():  # the losers wait for their next try
            if name != best and arm.wait == 0:
                arm.wait = arm.backoff
        if best is not None:
            return self._plan(best, pending, f"{best_rate:.2f} tokens/s against plain decoding's {self.plain_rate:.2f}")
        self.current = None
        self.last_choice, self.reason = "none", "plain: speculation lost its last probe"
        return None

    def _reprobe(self, arms: dict, pending: int, best_rate: float) -> StepPlan | None:
        """The re-probe of the first due arm whose promise beats its rival (``best_rate``, the
        best ready arm's or plain decoding's), or None; a due arm that cannot win waits the
        next, doubled, stretch out too."""
        for name, arm in arms.items():
            if not arm.due:
                continue
            # chain and lookup acceptances are learnt whatever runs, and so is a tree's wherever
            # p and q are known (``observe_draft_node``): their re-probe must promise to beat
            # the best arm; a tree learnt only by trying it must promise to beat plain decoding
            rival = self.plain_rate * self.margin if name.startswith("tree") and not arm.exact else best_rate
            promise = self.expected_case(name, pending)
            if arm.steps and arm.promise > 0.0 and (arm.exact or not name.startswith("tree")):
                # an arm that ran and lost: its rate, scaled by how far its learnt acceptance has
                # moved since (the optimistic chain model alone would promise a tree a win every time)
                promise = arm.rate * promise / arm.promise
            elif not arm.steps:  # never run: on the footing of what ran (``footing``)
                promise *= self.footing()
            if promise > rival:
                arm.due = False
                return self._plan(name, pending, f"re-probe {name} after backing off")
            arm.due = False  # what it has learnt says it cannot win: wait the next stretch out too
            arm.wait = arm.backoff
            arm.backoff = min(arm.backoff * 2, 256)
        return None

    def _choose_in_step(self, pending: int, arms: dict) -> StepPlan | None:
        """Beside other requests: the arm (or plain) with the best projected rate of the
        whole step (``in_step_case``).  The arms' own rates are those of a request alone (a
        step's rows cost far more alone), so they do not steer this choice; nor does the
        probing: every draft arm's acceptance is learnt at every drafted node, and
        lookup's at every step."""
        best, best_rate = None, self.in_step_case(None, pending) * self.margin
        for name in arms:
            rate = self.in_step_case(name, pending)
            if rate > best_rate:
                best, best_rate = name, rate
        if best is not None:
            return self._plan(best, pending, f"in a shared step {best}: {best_rate:.2f} tokens/s")
        self.current = None
        self.last_choice, self.reason = "none", "plain: in a shared step speculation does not pay"
        return None

    def _plan(self, arm: str, pending: int, reason: str, depth: int | None = None) -> StepPlan:
        lim = self.limits
        # the arm decides the method and K; the bounds are auto's own (``max_depth``/``max_budget``)
        method, k = ("resispec", int(arm[4:])) if arm.startswith("tree") else ("chain", 1)
        params = lim.replace(method=method, draws=k, policy="budget", use_draft=True, depth=depth or lim.max_depth,
                             budget=lim.max_budget)
        self.current = arm
        self.last_choice, self.reason = arm, reason
        if arm == "grammar":
            return StepPlan(arm, params, self.target_s, self.draft_s, accept=self.calibration.lookup(FORCED_BIN),
                            overhead_s=self.overhead_s, pending=pending, row_s=self.row_s,
                            background=self.background, chain=self.max_chain is not None)
        ask = self.text_ask() if arm == "text" else 0
        return StepPlan(arm, params, self.target_s, self.draft_s, accept=self.arms[arm].accept,
                        overhead_s=self.overhead_s, pending=pending, row_s=self.row_s,
                        children=self.arms[arm].children, promise=self.expected_case(arm, pending),
                        background=self.background, chain=self.max_chain is not None, ask=ask,
                        text_s=float(self.text_s[ask]))

    # -------------------------------------------------------------- learning

    def observe_step(self, plan: StepPlan, tokens: int, seconds: float) -> None:
        """A speculative step of ``plan`` emitted ``tokens`` in ``seconds`` (predicted)."""
        if plan.arm == "grammar":  # its rate is reported, never compared: the forced run chooses it
            self.grammar.observe(tokens, plan.value, seconds, self.decay)
            return
        arm = self.arms[plan.arm]
        arm.observe(tokens, plan.value, seconds, self.decay)
        arm.promise = plan.promise
        rival = max([self.plain_rate * self.margin] + [a.rate for n, a in self.arms.items()
                                                        if n != plan.arm and a.steps and a.wait == 0])
        if arm.rate <= rival:  # not better than plain or another arm: try again later
            self.lost += 1
            arm.wait = arm.backoff
            arm.backoff = min(arm.backoff * 2, 256)
        else:
            arm.backoff = 4

    def record_time(self, plan: StepPlan | None, measured_s: float, context: int = 0) -> None:
        """A step of ``plan`` (None: plain) after ``context`` tokens took ``measured_s`` of wall
        time: kept beside its predicted time for ``summary`` and, for a step alone, told to
        ``check`` (which may correct the curves of later requests); never used to choose here."""
        kind = "none" if plan is None else plan.arm
        predicted = 1.0 / self.plain_rate if plan is None else plan.cost
        if self.check is not None and self.background is None:
            rows = 1 if plan is None else plan.n_nodes + 1
            alpha, at = self.check_context
            self.check.record(predicted, measured_s, self.check_scale, rows=rows, context=context,
                              extra_s=alpha * at * rows)
        t = self.timing.setdefault(kind, [0, 0.0, 0.0])
        t[0] += 1
        t[1] += predicted
        t[2] += measured_s

    def observe_children(self, plan: StepPlan, mean_children: float) -> None:
        """After a step of ``plan``: its expanded nodes had ``mean_children`` distinct
        candidates each (used by the next steps' plans only)."""
        arm = self.arms.get(plan.arm)
        if arm is not None and not arm.exact:
            arm.children = 0.8 * arm.children + 0.2 * mean_children

    def observe_chain(self, alpha: float) -> None:
        """At a drafted node of any step, a chain's single draw would have been accepted with
        chance ``alpha``: the chain arm's acceptance, learnt whatever ran."""
        arm = self.arms.get("chain")
        if arm is not None:
            arm.learn(alpha, self.decay)

    def draft_accepts(self) -> list[tuple[int, float]]:
        """``(K, acceptance)`` of each draft arm."""
        return [(a.k, a.accept) for a in self.arms.values() if a.k]

    def observe_draft_node(self, accept: np.ndarray, distinct: np.ndarray) -> None:
        """At a drafted node of any step, with p and q known: a node of each draft arm (K =
        ``exact_ks``) would accept a candidate with chance ``accept`` and have ``distinct``
        children on average (``verify.acceptance_profile``): every draft arm's acceptance and
        width, learnt exactly whatever ran."""
        i = 0
        for arm in self.arms.values():
            if not arm.k:
                continue
            arm.learn(float(accept[i]), self.decay, float(distinct[i]))
            arm.exact = True
            i += 1

    def observe_node(self, accepted: bool) -> None:
        """A reached, expanded node of the step under way was verified (where
        ``observe_draft_node`` could not be told)."""
        arm = self.arms.get(self.current)
        if arm is None or self.current == "chain":  # the chain's is learnt exactly (observe_chain)
            return
        arm.learn(float(accepted), self.decay)

    def summary(self) -> str:
        """What auto did and why, in words, for ``/stats`` and ``--verbose``: the last choice
        (and how many steps speculated), each arm's rate and acceptance, and each kind of
        step's predicted against measured time."""
        steps = {k: t[0] for k, t in self.timing.items()}
        total, spec = sum(steps.values()), sum(n for k, n in steps.items() if k != "none")
        if self.last_choice != "none":
            head = f"auto: {_words(self.last_choice)} ({self.reason})"
        elif not self.arms:
            head = "auto: plain decoding (no speculation could beat it on these costs, even with every candidate accepted)"
        elif self.lost:
            head = f"auto: plain decoding; speculation did not pay on {self.lost} probe{'s' * (self.lost > 1)}"
        else:
            head = f"auto: plain decoding ({self.reason})"
        lines = [head + (f"; {spec} of {total} steps speculated" if total else "")]
        ran = [f"{n} {a.rate:.2f} over {a.steps} step{'s' * (a.steps != 1)}" for n, a in self.arms.items() if a.steps]
        if self.grammar is not None and self.grammar.steps:
            ran.append(f"grammar {self.grammar.rate:.2f} over {self.grammar.steps} steps")
        idle = [n for n, a in self.arms.items() if not a.steps]
        lines.append(f"  tokens/s predicted: plain {self.plain_rate:.2f}" + "".join(f", {r}" for r in ran)
                     + (f"; not run: {', '.join(idle)}" if idle else ""))
        accept = [f"{n} {a.accept:.2f}" for n, a in self.arms.items()]
        if self.grammar is not None and self.grammar.steps:
            accept.append(f"forced tokens {self.calibration.lookup(FORCED_BIN):.2f}")
        if accept:
            lines.append(f"  acceptance per node: {', '.join(accept)}")
        if self.timing:
            lines.append("  step time predicted/measured: " + ", ".join(
                f"{'plain' if k == 'none' else k} {1000 * p / n:.1f}/{1000 * m / n:.1f} ms over {n} step{'s' * (n != 1)}"
                for k, (n, p, m) in self.timing.items()))
        return "\n".join(lines)


def chain_limits(limits: DraftParams, max_chain: int) -> DraftParams:
    """``limits`` for a target that evaluates one chain of at most ``max_chain`` nodes
    (recurrent memory, ``protocol.ModelBackend.max_chain``): one draw a node, so no tree arm,
    and depth and budget within the chain."""
    n = max(1, int(max_chain))
    return limits.replace(draws=1, depth=min(limits.max_depth, n), budget=min(limits.max_budget, n))


def _words(arm: str) -> str:
    """An arm's name in words (its short name after it)."""
    if arm.startswith("tree"):
        return f"a {arm[4:]}-draw draft tree (tree{arm[4:]})"
    return {"chain": "a draft chain (chain)", "lookup": "lookup candidates, no draft call (lookup)",
            "text": "the other-vocabulary draft's text, re-tokenized (text)",
            "grammar": "the grammar's forced tokens (grammar)"}.get(arm, arm)


def warm_up() -> None:
    """Compile (or load from Numba's cache) ``StepPlan.width``'s search: one signature,
    its arrays read-only (``kernels.arrays.frozen``) alone or beside other requests."""
    table = cost_table(CostCurve((1, 2), (1.0, 1.5)), 4)
    StepPlan("chain", DraftParams(depth=4, budget=8), table, table, accept=0.5, overhead_s=0.0).width(0, [0.5, 0.2])
