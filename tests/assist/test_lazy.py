"""``lazy.After``: a constraint that starts after a free block (a reasoning model's thinking),
and a budget that closes the block.

Unit tests of its masks on the paths it is asked about, then exactness through the real
engine on the Markov fakes of law_harness.py: the joint law of the first 4 tokens, around
the switch from the free block to the inner constraint (``fake_models.PathConstraint``), is
plain sampling under the same masks, for every method, with and without lookup, auto and
lookup alone, with a budget of 2 (the closing token forced at the third token when the model
has not closed the block by then); and for a block the model may open itself.  The same
for markers spelled in several tokens (a vocabulary without ``<think>``): a close that comes
by itself or is forced token by token at the budget, continuing a start of it the block
already ends with; an opening the inner constraint allows all along (the reply's first tokens
stay ambiguous until the marker is complete) or only at first (its rest then forced).  A
budget counted on the committed tokens alone (blind to the node's path) is shown to be
rejected.  The reference rule (``Thinking.allowed``) is written from the phases' definition,
apart from the class.
"""

from __future__ import annotations

import numpy as np
import pytest

from fake_models import PathConstraint
from law_harness import (COST_REGIMES, EOG, LOOKUP_PROMPT, METHODS, N_TOKENS, PROMPT, RUNS, TEMPERATURES, V,
                         _pair, check_law, constrained_law, sample_constrained)
from resispec_gguf.assist.lazy import AFTER, BEFORE, FREE, After
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.engine import Engine
from resispec_gguf.kernels.masks import bitmask_from_ids

OPEN, CLOSE = 4, 3
# markers of two tokens each: the opening one is allowed by INNER all along (so the reply's
# first tokens stay ambiguous until the marker is complete), the closing one is not a repeat
OPEN2, CLOSE2 = (4, 2), (3, 1)
INNER = PathConstraint(V, EOG)


class Thinking:
    """The exact rule of ``After(INNER, close, open=open, phase, budget)`` after a history,
    for markers of one token or several (a fixed tokenisation): the block opens only when the
    reply starts with ``open`` (phase BEFORE; while the reply is a proper start of it, the
    next token of ``open`` is allowed beside what INNER allows of the reply, if INNER allows
    it at all), holds at most ``budget`` tokens, after which only the rest of ``close`` may
    follow (continuing the longest start of ``close`` the block ends with), never ends (EOG
    is refused inside it: INNER has not been met), and after the first ``close`` the tokens
    follow INNER from the token after it."""

    def __init__(self, phase: str, budget: int = -1, open=(OPEN,), close=(CLOSE,)):
        self.phase, self.budget, self.open, self.close = phase, budget, tuple(open), tuple(close)

    def constraint(self) -> After:
        markers = [m[0] if len(m) == 1 else m for m in (self.open, self.close)]
        return After(INNER, markers[1], V, open=markers[0], phase=self.phase, budget=self.budget, ends=(EOG,))

    @staticmethod
    def _inner_allows(h) -> bool:
        return all(h[i] in INNER.allowed(h[:i]) for i in range(len(h)))

    def allowed(self, history) -> list[int]:
        h, o, c = list(history), list(self.open), list(self.close)
        if self.phase == AFTER:
            return INNER.allowed(h)
        body = h
        if self.phase == BEFORE:
            if len(h) < len(o) and h == o[:len(h)]:  # still a start of the opening marker
                inner = INNER.allowed(h) if self._inner_allows(h) else []
                return sorted(set(inner) | {o[len(h)]})
            if h[:len(o)] != o:
                return INNER.allowed(h)
            body = h[len(o):]
        for e in range(len(c), len(body) + 1):  # the first close, if any
            if body[e - len(c):e] == c:
                return INNER.allowed(body[e:])
        if 0 <= self.budget <= len(body):
            done = max(k for k in range(len(c)) if k <= len(body) and body[len(body) - k:] == c[:k])
            return [c[done]]
        return [x for x in range(V) if x != EOG]


def _ids(mask) -> list[int]:
    bits = np.unpackbits(np.asarray(mask, np.int32).view(np.uint8), bitorder="little")
    return [int(i) for i in np.flatnonzero(bits[:V])]


# "open 3": INNER allows its first token only, so the rest is forced once the reply took it
MARKERS = {"one token": ((OPEN,), (CLOSE,)), "two tokens": (OPEN2, CLOSE2), "open 3, close 2": ((4, 3, 0), CLOSE2)}


@pytest.mark.parametrize("markers", MARKERS)
@pytest.mark.parametrize("phase,budget", [(FREE, -1), (BEFORE, -1), (FREE, 2), (BEFORE, 0), (AFTER, 1), (FREE, 0)])
def test_masks_follow_the_rule_on_every_path(phase, budget, markers):
    """Every path of up to 5 tokens the masks allow, asked from every committed prefix: the
    mask is the rule's, whatever was committed before (paths are asked from the state
    without leaking into it)."""
    spec = Thinking(phase, budget, *MARKERS[markers])

    def paths(prefix, depth):
        yield prefix
        if depth and spec.allowed(prefix) != [EOG]:
            for x in spec.allowed(prefix):
                if x != EOG:
                    yield from paths(prefix + [x], depth - 1)

    for committed in paths([], 2):
        state = spec.constraint().start()
        state.advance(committed)
        for path in paths([], 3):
            full = committed + path
            if any(full[i] not in spec.allowed(full[:i]) for i in range(len(full))):
                continue
            assert _ids(state.mask(path)) == spec.allowed(full), (committed, path)
        assert state.is_stopped() == (spec.allowed(committed) == [EOG])


def test_no_inner_constraint_leaves_everything_but_the_budget_free():
    state = After(None, CLOSE, V, open=OPEN, phase=BEFORE, budget=1).start()
    assert _ids(state.mask([])) == list(range(V))
    assert _ids(state.mask([OPEN])) == list(range(V))
    assert _ids(state.mask([OPEN, 0])) == [CLOSE]
    assert _ids(state.mask([OPEN, 0, CLOSE])) == list(range(V))
    state.advance([OPEN, 0, CLOSE, 1])
    assert not state.is_stopped()


def test_the_end_tokens_are_free_only_without_an_inner_constraint():
    """A reply that ends inside the block would never meet the inner constraint (a forced
    tool call, a schema): its end tokens are refused there; with no inner constraint they are
    allowed (a budget alone lets the reply end while thinking)."""
    inner = After(INNER, CLOSE, V, open=OPEN, phase=FREE, ends=(EOG,)).start()
    assert EOG not in _ids(inner.mask([0])) and CLOSE in _ids(inner.mask([0]))
    assert EOG in _ids(After(None, CLOSE, V, open=OPEN, phase=FREE, ends=(EOG,)).start().mask([0]))


def test_a_union_with_a_wider_inner_mask_keeps_its_words():
    """The inner mask may be longer than the vocabulary's words (llguidance pads to its own
    vocabulary): the first mask of BEFORE is their union, as long as the longer one."""

    class Wide:
        def start(self):
            return self

        def mask(self, path):
            return bitmask_from_ids([1, 40], 64)

    m = After(Wide(), CLOSE, V, open=OPEN, phase=BEFORE).start().mask([])
    assert len(m) == 2 and _ids(m) == [1, OPEN]


def test_a_trigger_fed_to_the_inner_constraint():
    """``feed_close``: free text until the trigger, which is the inner constraint's first
    token (a tool call whose grammar starts at its opening marker)."""
    trigger = 2  # a token INNER allows first
    state = After(INNER, trigger, V, feed_close=True).start()
    assert _ids(state.mask([0, 1])) == list(range(V))
    for path in ([trigger], [0, trigger, 1], [0, trigger, 1, 0]):
        k = path.index(trigger)
        assert _ids(state.mask(path)) == INNER.allowed(path[k:]), path
    state.advance([0, trigger, 1])
    assert _ids(state.mask([])) == INNER.allowed([trigger, 1])


def test_forced_tokens_are_the_inner_ones_past_the_block_and_the_close_at_the_budget():
    """``forced`` (the engine's free candidates): nothing while the text is free or the
    block may still open, ``close`` once the budget is spent, then the inner constraint's
    own forced tokens on the tokens past ``close``; an inner one without them forces
    nothing."""
    from fake_models import SpelledConstraint

    spelled = SpelledConstraint(V, EOG)
    state = After(spelled, CLOSE, V, open=OPEN, phase=BEFORE, budget=2).start()
    assert state.forced([]) == [] and state.forced([OPEN]) == [] and state.forced([OPEN, 1]) == []
    assert state.forced([OPEN, 1, 2]) == [CLOSE]  # the budget is spent: only the close may follow
    assert state.forced([OPEN, CLOSE]) == spelled.forced([]) == [2]
    assert state.forced([OPEN, CLOSE, 0]) == spelled.forced([0]) == [1]
    assert state.forced([2]) == spelled.forced([2])  # no block: the inner constraint at once
    fed = After(spelled, 0, V, feed_close=True).start()  # the close token ("a") is the inner's first
    assert fed.forced([1, 0]) == spelled.forced([0]) == [1]
    assert After(None, CLOSE, V).start().forced([CLOSE]) == []



def test_forced_tokens_finish_markers_spelled_in_several_tokens():
    """A marker of several tokens: the rest of the opening once INNER no longer allows the
    reply's tokens (never while it still does), the rest of the closing at the budget (from
    where the block's last tokens already started it)."""
    state = After(INNER, CLOSE2, V, open=(4, 3, 0), phase=BEFORE, budget=1, ends=(EOG,)).start()
    assert state.forced([]) == [] and state.forced([4]) == []  # INNER allows [4]: a reply may go on from it
    assert state.forced([4, 3]) == [0]  # INNER refuses 3 after 4: only the opening goes on
    assert state.forced([4, 3, 0]) == []  # in the block, under the budget
    assert state.forced([4, 3, 0, 2]) == [3, 1] and state.forced([4, 3, 0, 3]) == [1]
    assert state.forced([4, 3, 0, 3, 1]) == INNER.forced([])  # past the block: the inner constraint's
    state.advance([4, 3])
    assert state.forced([]) == [0] and _ids(state.mask([])) == [0]


@pytest.mark.parametrize("bad", [dict(phase="thinking"), dict(phase=BEFORE, open=None), dict(open=V), dict(open=())])
def test_bad_settings_are_refused(bad):
    kw = {"open": OPEN, "phase": FREE, **bad}
    with pytest.raises(ValueError):
        After(None, CLOSE, V, **kw)


# --------------------------------------------------------------------------- exactness


def _case(method, lookup):
    """``(target, engine, prompt, draft params)``: auto on GPU-like costs (lookup always
    considered), lookup chains alone (no draft model), or a fixed method's tree."""
    target, draft = _pair()
    prompt = LOOKUP_PROMPT if lookup or method in ("auto", "lookup only") else PROMPT
    if method == "auto":
        return target, Engine(target, draft, cost_curves=COST_REGIMES["gpu"]), prompt, \
            DraftParams(method="auto", draws=3, depth=4, budget=8, draft_support=4)
    if method == "lookup only":
        return target, Engine(target, None), prompt, DraftParams(method="chain", depth=3, budget=6, lookup=True)
    dp = DraftParams(method=method, draws=3, depth=3, budget=6, draft_support=4, lookup=lookup)
    return target, Engine(target, draft), prompt, dp


def _crossing(seq, spec: Thinking) -> str:
    """Where ``seq`` went: "inner" (the block never opened: INNER from the first token),
    "free" (inside the block), "closed" (its last tokens closed the block) or "switched"
    (closed it and went on under the inner constraint)."""
    body, o, c = list(seq), list(spec.open), list(spec.close)
    if spec.phase == BEFORE:
        if body[:len(o)] != o:
            return "inner" if len(body) >= len(o) or body != o[:len(body)] else "free"
        body = body[len(o):]
    for e in range(len(c), len(body) + 1):
        if body[e - len(c):e] == c:
            return "switched" if e < len(body) else "closed"
    return "free"


def _switched(seq, spec: Thinking) -> bool:
    """Whether ``seq`` closed the block and went on under the inner constraint."""
    return _crossing(seq, spec) == "switched"


SPECS = {"after-thinking": Thinking(FREE), "may-open": Thinking(BEFORE), "budget-2": Thinking(FREE, 2),
         # markers of several tokens: the block closes by itself ([3, 1] in the first two tokens)
         # or at the budget, continuing a start of the close ([x, 3] -> 1) or from its first token
         "two-budget-2": Thinking(FREE, 2, OPEN2, CLOSE2),
         # an opening INNER allows all along, then a close forced at once (budget 0)
         "two-may-open": Thinking(BEFORE, 0, OPEN2, CLOSE2),
         # an opening INNER allows at first only: its last tokens are forced once the reply took 3
         "three-may-open": Thinking(BEFORE, 1, (4, 3, 0), CLOSE2)}
# the least mass, under the exact law, of the ways a spec's replies go (so that the law
# tests see every side of the markers)
CROSSINGS = {"after-thinking": {"switched": 0.15}, "may-open": {"switched": 0.15}, "budget-2": {"switched": 0.15},
             "two-budget-2": {"switched": 0.15, "closed": 0.15}, "two-may-open": {"inner": 0.15, "closed": 0.05},
             "three-may-open": {"inner": 0.15, "free": 0.15}}


def test_the_laws_cross_the_switch():
    """The law tests below only mean something where the switch is crossed often: real mass
    on sequences that close the block and go on under the inner mask, and, with a budget,
    on sequences whose close was forced; with markers of several tokens, on replies that open
    the block and on replies that start like its opening but go on under INNER."""
    target, _ = _pair()
    sp = TEMPERATURES["T1"]
    for prompt in (PROMPT, LOOKUP_PROMPT):
        for name, spec in SPECS.items():
            law = constrained_law(target, prompt, sp, N_TOKENS, spec)
            assert abs(sum(law.values()) - 1.0) < 1e-9
            for way, least in CROSSINGS[name].items():
                assert sum(p for s, p in law.items() if _crossing(s, spec) == way) >= least, (name, way)
        budget = SPECS["budget-2"]
        law = constrained_law(target, prompt, sp, N_TOKENS, budget)
        forced = sum(p for s, p in law.items() if len(s) >= 3 and CLOSE not in s[:2] and EOG not in s[:2])
        assert forced >= 0.2 and all(s[2] == CLOSE for s in law if len(s) >= 3 and CLOSE not in s[:2]
                                     and EOG not in s[:2])
        ambiguous = SPECS["two-may-open"]
        law = constrained_law(target, prompt, sp, N_TOKENS, ambiguous)
        assert sum(p for s, p in law.items() if s[:1] == (4,) and s[:2] != OPEN2) >= 0.1  # began like it, went on


CASES = [(m, False) for m in METHODS] + [("resispec", True), ("chain", True), ("auto", False),
                                          ("lookup only", True)]
# every case with a budget of 2 in a block the prompt opened (the close comes by itself in
# the first two tokens, or is forced at the third), with markers of one token and of two; a
# block the model may open, for a few
LAW_CASES = ([(m, lookup, name) for m, lookup in CASES for name in ("budget-2", "two-budget-2")]
             + [(m, lookup, "may-open") for m, lookup in (("resispec", False), ("chain", True), ("auto", False))]
             + [(m, lookup, name) for m, lookup in (("resispec", False), ("specinfer", False), ("rrs", False),
                                                   ("chain", True), ("auto", False), ("lookup only", True))
                for name in ("two-may-open", "three-may-open")])


@pytest.mark.parametrize("method,lookup,name", LAW_CASES)
def test_the_output_law_around_the_switch_is_exact(method, lookup, name):
    target, engine, prompt, dp = _case(method, lookup)
    spec, sp = SPECS[name], TEMPERATURES["T1"]
    counts = sample_constrained(engine, prompt, sp, dp, RUNS, spec.constraint())
    for way, least in CROSSINGS[name].items():  # each side of the markers seen
        assert sum(c for s, c in counts.items() if _crossing(s, spec) == way) >= 0.6 * least * RUNS, way
    check_law(counts, constrained_law(target, prompt, sp, N_TOKENS, spec), f"after/{name}/{method}/{lookup}")


class _BudgetBlind(After):
    """A broken budget: a node's mask counts the block's committed tokens only, not those on
    the node's path (right without speculation, where every mask is asked with an empty
    path)."""

    def start(self):
        state = super().start()

        def mask(path):
            phase, _, _, inner = state._walk(path)
            if phase == FREE:
                return bitmask_from_ids([CLOSE] if 0 <= self.budget <= state.count else [x for x in range(V) if x != EOG], V)
            return state.inner.mask(inner)

        state.mask = mask
        return state


def test_a_budget_blind_to_the_path_is_caught():
    """The law test has the power to see a budget counted on the committed tokens alone: a
    tree path overruns the budget, and the check rejects the output."""
    target, draft = _pair()
    sp, spec = TEMPERATURES["T1"], SPECS["budget-2"]
    broken = _BudgetBlind(INNER, CLOSE, V, phase=FREE, budget=2, ends=(EOG,))
    law = constrained_law(target, PROMPT, sp, N_TOKENS, spec)
    check_law(sample_constrained(Engine(target, draft), PROMPT, sp, DraftParams(method="none"), RUNS, broken),
              law, "budget-blind/none")
    dp = DraftParams(method="resispec", draws=3, depth=3, budget=6, draft_support=4)
    counts = sample_constrained(Engine(target, draft), PROMPT, sp, dp, RUNS, broken)
    with pytest.raises(AssertionError, match="probability 0|joint p"):
        check_law(counts, law, "budget-blind/resispec")


@pytest.mark.parametrize("method", ("none",) + METHODS + ("auto",))
def test_greedy_is_plain_greedy_under_the_same_masks(method):
    sp = SamplingParams(temperature=0.0)
    n = 8
    for spec in SPECS.values():
        for lookup, prompt in ((False, PROMPT), (True, LOOKUP_PROMPT)):
            target, draft = _pair()
            law = constrained_law(target, prompt, sp, n, spec)
            assert len(law) == 1
            dp = DraftParams(method=method, draws=3, depth=3, budget=6, draft_support=4,
                             lookup=lookup and method not in ("none", "auto"))
            engine = Engine(target, draft, cost_curves=COST_REGIMES["gpu"])
            res = engine.generate(prompt, sp.replace(max_tokens=n), dp, constraint=spec.constraint())
            assert [tuple(res.tokens) + ((EOG,) if res.finish_reason == "eos" else ())] == list(law)
