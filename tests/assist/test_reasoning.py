"""Reasoning models (assist/reasoning.py): thinking markers found in a vocabulary, where a
reply starts, the reply split into reasoning and answer (streamed and not, alike), the
request's reasoning fields, and the plan of a chat on tiny GGUFs whose vocabulary holds
``<think>``/``</think>`` (Qwen3-style and DeepSeek-R1-distill-style templates)."""

from __future__ import annotations

import itertools
import json

import pytest

import tiny_gguf
from resispec_gguf.assist import reasoning
from resispec_gguf.assist.lazy import AFTER, BEFORE, FREE, After
from resispec_gguf.assist.plan import plan_chat
from resispec_gguf.config import DraftParams, ReasoningParams, SamplingParams
from resispec_gguf.engine import Engine
from resispec_gguf.errors import FieldError

START_ID, END_ID = tiny_gguf.N_VOCAB, tiny_gguf.N_VOCAB + 1
FMT = reasoning.ReasoningFormat("<think>", "</think>", START_ID, END_ID)
MSGS = [{"role": "user", "content": "Think, then answer."}]


def _load(pair) -> Engine:
    return Engine.load(str(pair[0]), str(pair[1]), n_ctx=512, n_threads=1, flash_attn=False, progress=False)


@pytest.fixture(scope="module")
def think(think_pair):
    with _load(think_pair) as e:
        yield e


@pytest.fixture(scope="module")
def open_think(open_think_pair):
    with _load(open_think_pair) as e:
        yield e


# --------------------------------------------------------------------------- split


@pytest.mark.parametrize("phase,text,want", [
    (BEFORE, "<think>\nHmm, 2+2.\n</think>\n\nIt is 4.", ("Hmm, 2+2.", "It is 4.")),
    (BEFORE, "It is 4.", (None, "It is 4.")),
    (BEFORE, " <think>x</think>y", (None, " <think>x</think>y")),  # only a reply that opens with it
    (BEFORE, "<think>cut short", ("cut short", "")),
    (FREE, "Hmm.\n</think>\n\nIt is 4.</think>", ("Hmm.", "It is 4.</think>")),
    (FREE, "\n\n", ("", "")),
    (AFTER, "<think>x</think>y", (None, "<think>x</think>y")),
])
def test_split(phase, text, want):
    assert reasoning.split_reasoning(FMT, phase, text) == want


def test_no_format_splits_nothing():
    assert reasoning.split_reasoning(None, BEFORE, "<think>x</think>y") == (None, "<think>x</think>y")


TEXTS = ["<think>\nHmm, 2+2.\n </think>\n\nIt is 4.\n", "<think>a</thi", "<thin", "<think>", "plain <think>",
         "<think>\n\n</think>\n\n", "<think> a </ b </think>c</think>", "<think>x" + " " * 3]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("phase", [BEFORE, FREE])
def test_streamed_parts_concatenate_to_the_split(text, phase):
    """Cut anywhere into pieces (every 1- and 2-cut of the text): what goes out is always a
    prefix of the final parts, and with ``finish`` exactly them."""
    final = reasoning.split_reasoning(FMT, phase, text)
    cuts = range(1, len(text))
    for points in itertools.chain([()], ((c,) for c in cuts), itertools.combinations(cuts, 2)):
        bounds = [0, *points, len(text)]
        stream = reasoning.ReasoningStream(FMT, phase)
        r = c = ""
        for a, b in zip(bounds, bounds[1:]):
            dr, dc = stream.push(text[a:b])
            r, c = r + dr, c + dc
            assert (final[0] or "").startswith(r) and final[1].startswith(c), (points, r, c)
        dr, dc = stream.finish(text)
        assert (r + dr, c + dc) == ((final[0] or ""), final[1]), points


@pytest.mark.parametrize("phase", [BEFORE, FREE, AFTER])
def test_random_replies_stream_as_they_split(phase):
    """Random replies made of marker fragments, blanks and letters, cut at random: the
    streamed parts reassemble to the split, and never run ahead of it."""
    import random

    rng = random.Random(7)
    atoms = ["<think>", "</think>", "</", "<thi", "nk>", "a", "b ", " ", "\n", "<", "/"]
    for _ in range(400):
        text = "".join(rng.choice(atoms) for _ in range(rng.randrange(0, 9)))
        final = reasoning.split_reasoning(FMT, phase, text)
        stream, r, c, i = reasoning.ReasoningStream(FMT, phase), "", "", 0
        while i < len(text):
            j = min(len(text), i + rng.randrange(1, 5))
            dr, dc = stream.push(text[i:j])
            r, c, i = r + dr, c + dc, j
            assert (final[0] or "").startswith(r) and final[1].startswith(c), (text, r, c)
        dr, dc = stream.finish(text)
        assert (r + dr, c + dc) == ((final[0] or ""), final[1]), text


def test_phase_is_read_from_the_prompts_last_tokens():
    piece = {START_ID: b"<think>", END_ID: b"</think>", 10: b"\n", 11: b"  ", 12: b"x", 13: b"<th", 14: b"ink>",
             15: b"</", 16: b"think", 17: b">"}.__getitem__
    assert FMT.phase([12, START_ID, 10], piece) == FREE
    assert FMT.phase([START_ID, 10, END_ID, 10, 11], piece) == AFTER
    assert FMT.phase([START_ID, 12, 10], piece) == BEFORE
    assert FMT.phase([], piece) == BEFORE
    # markers spelled in several tokens, whichever way the prompt's text was cut
    assert FMT.phase([12, 13, 14, 10, 11], piece) == FREE
    assert FMT.phase([13, 14, 15, 16, 12], piece) == BEFORE
    assert FMT.phase([13, 14, 10, 15, 16, 17, 10], piece) == AFTER


# --------------------------------------------------------------------------- fields


def test_reasoning_fields_are_checked_naming_the_field():
    req = reasoning.check_reasoning(ReasoningParams(reasoning_budget=5), reasoning_format="none",
                                    chat_template_kwargs={"enable_thinking": False})
    assert (req.split, req.budget, req.template_variables()) == (False, 5, {"enable_thinking": False})
    assert reasoning.check_reasoning(reasoning_budget=0).template_variables() == {"enable_thinking": False}
    assert reasoning.check_reasoning(reasoning_budget=0, chat_template_kwargs={"enable_thinking": True}) \
        .template_variables() == {"enable_thinking": True}
    assert reasoning.check_reasoning().template_variables() is None
    bad = [({"chat_template_kwargs": "enable_thinking"}, "chat_template_kwargs"),
           ({"chat_template_kwargs": [1]}, "chat_template_kwargs"),
           ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs.messages"),
           ({"reasoning_budget": -2}, "reasoning_budget"),
           ({"reasoning_budget": 10**7}, "reasoning_budget"),
           ({"reasoning_budget": 1.5}, "reasoning_budget"),
           ({"reasoning_format": "deepseek"}, "reasoning_format")]
    for kw, param in bad:
        with pytest.raises(FieldError) as e:
            reasoning.check_reasoning(**kw)
        assert e.value.param == param and "\n" not in str(e.value)


def test_constrain_wraps_only_when_something_is_constrained():
    assert reasoning.constrain(FMT, None, FREE, -1, 300) is None
    inner = object()
    assert reasoning.constrain(FMT, inner, AFTER, 3, 300) is inner
    wrapped = reasoning.constrain(FMT, None, BEFORE, 2, 300)
    assert isinstance(wrapped, After) and (wrapped.open, wrapped.close, wrapped.budget) == ((START_ID,), (END_ID,), 2)
    spelled = reasoning.ReasoningFormat("<think>", "</think>", [7, 8, 9], (7, 10, 9))
    wrapped = reasoning.constrain(spelled, None, FREE, 0, 300)
    assert (wrapped.close, wrapped.budget) == ((7, 10, 9), 0) and wrapped.start().forced([]) == [7, 10, 9]


# --------------------------------------------------------------------------- on tiny models


def test_markers_are_found_in_a_vocabulary_that_has_them(think, engine):
    found = think.reasoning_format()
    assert (found.start, found.end, found.start_ids, found.end_ids) == (FMT.start, FMT.end, (START_ID,), (END_ID,))
    assert found.shown == ()  # user-defined: their text shows anyway
    assert think.target.eos in found.ends and all(think.target.is_eog(t) for t in found.ends)
    assert engine.reasoning_format() is None  # the plain tiny pair: no thinking markers


def test_a_model_without_markers_plans_as_before(engine):
    plan = plan_chat(engine, MSGS, reasoning_budget=3)
    assert plan.constraint is None and plan.reasoning is None
    assert plan.prompt == engine.chat_tokens(MSGS)
    assert plan.split("<think>x</think>y") == (None, "<think>x</think>y")


def test_the_template_gets_chat_template_kwargs(think):
    thinking = plan_chat(think, MSGS)
    assert thinking.phase == BEFORE and thinking.constraint is None and thinking.reasoning == FMT
    closed = plan_chat(think, MSGS, chat_template_kwargs={"enable_thinking": False})
    assert closed.prompt[:len(thinking.prompt)] == thinking.prompt
    assert START_ID in closed.prompt[len(thinking.prompt):] and END_ID in closed.prompt
    assert closed.phase == AFTER
    assert plan_chat(think, MSGS, reasoning_budget=0).prompt == closed.prompt  # budget 0: no thinking


def test_a_template_that_opens_the_block_starts_in_it(open_think):
    plan = plan_chat(open_think, MSGS)
    assert START_ID in plan.prompt[-2:] and plan.phase == FREE and plan.constraint is None


@pytest.mark.parametrize("method", ["none", "resispec", "auto"])
def test_a_budget_forces_the_end_of_thinking(open_think, method):
    """With a budget of 6 the 7th token closes the block, whatever the model wanted; the
    answer after it is the content."""
    plan = plan_chat(open_think, MSGS, reasoning_budget=6)
    dp = DraftParams(method=method, draws=3, depth=3, budget=6)
    forced = 0
    for seed in range(4):
        res = open_think.generate(plan.prompt, SamplingParams(seed=seed, max_tokens=20), dp,
                                  constraint=plan.constraint)
        if len(res.tokens) > 6:
            assert END_ID in res.tokens[:7]
            k = res.tokens.index(END_ID)
            forced += k == 6

            def text(tokens):
                return b"".join(open_think.token_piece(t) for t in tokens).decode("utf-8", "replace")

            assert plan.split(res.text) == (text(res.tokens[:k]).strip(), text(res.tokens[k + 1:]).lstrip())
    assert forced  # the tiny model rarely closes the block by itself


def test_a_schema_applies_after_the_thinking(open_think):
    """A JSON response_format on a reasoning model: free thinking (budget 4 closes it), then
    JSON that parses."""
    plan = plan_chat(open_think, MSGS, response_format={"type": "json_object"}, reasoning_budget=4)
    for seed in range(3):
        res = open_think.generate(plan.prompt, SamplingParams(seed=seed, max_tokens=60), DraftParams(method="auto"),
                                  constraint=plan.constraint)
        assert res.tokens[4] == END_ID or END_ID in res.tokens[:5]
        thinking, content = plan.split(res.text)
        assert thinking is not None
        if res.finish_reason == "eos":
            assert isinstance(json.loads(content), dict)


def test_a_forced_tool_call_comes_after_the_thinking(open_think):
    """tool_choice "required" on a reasoning model: the thinking first (a budget of 3 closes
    it), then the call, read from the answer alone."""
    add = {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}
    plan = plan_chat(open_think, MSGS, tools=[add], tool_choice="required", reasoning_budget=3)
    for seed in range(3):
        res = open_think.generate(plan.prompt, SamplingParams(seed=seed, max_tokens=80), DraftParams(),
                                  constraint=plan.constraint)
        assert END_ID in res.tokens[:4]
        thinking, content = plan.split(res.text)
        assert thinking is not None and content.startswith("<tool_call>")
        if res.finish_reason == "eos":
            (call,) = plan.tool_calls(content)[1]
            assert call.name == "add" and isinstance(json.loads(call.arguments)["a"], int)


# --------------------------------------------------------------------------- markers that are not user-defined tokens


def _pair_with(tmp_path_factory, name: str, template: str, *, control: bool):
    """A tiny pair with ``template``: its thinking markers control tokens (``control``), or
    absent from the vocabulary (spelled in bytes)."""
    folder = tmp_path_factory.mktemp(name)
    extra = tiny_gguf.THINK_TOKENS if control else ()
    common = dict(base_seed=0, chat_template=template, extra_tokens=extra)
    return (tiny_gguf.write_tiny_llama(folder / "target.gguf", seed=0, **common),
            tiny_gguf.write_tiny_llama(folder / "draft.gguf", seed=1, noise=tiny_gguf.DEFAULT_DRAFT_NOISE, **common))


@pytest.fixture(scope="module")
def control_think(tmp_path_factory):
    with _load(_pair_with(tmp_path_factory, "control-think", tiny_gguf.THINK_TEMPLATE, control=True)) as e:
        yield e


@pytest.fixture(scope="module")
def spelled_open_think(tmp_path_factory):
    with _load(_pair_with(tmp_path_factory, "spelled-open", tiny_gguf.OPEN_THINK_TEMPLATE, control=False)) as e:
        yield e


@pytest.fixture(scope="module")
def spelled_think(tmp_path_factory):
    with _load(_pair_with(tmp_path_factory, "spelled", tiny_gguf.THINK_TEMPLATE, control=False)) as e:
        yield e


def _text(engine, tokens) -> str:
    return b"".join(engine.token_piece(t) for t in tokens).decode("utf-8", "replace")


def test_control_token_markers_are_found_and_shown(control_think):
    """Markers stored as control tokens: found, and their text shows in the reply (so the
    split, which reads the text, sees them); the Qwen3-style template's closed block is read
    as closed."""
    found = control_think.reasoning_format()
    start, end = tiny_gguf.N_VOCAB, tiny_gguf.N_VOCAB + 1
    assert (found.start_ids, found.end_ids, set(found.shown)) == ((start,), (end,), {start, end})
    assert control_think.token_piece(start) == b"<think>" and control_think.token_piece(end) == b"</think>"
    assert plan_chat(control_think, MSGS).phase == BEFORE
    assert plan_chat(control_think, MSGS, chat_template_kwargs={"enable_thinking": False}).phase == AFTER
    plan = plan_chat(control_think, MSGS, response_format={"type": "json_object"}, reasoning_budget=3)
    assert plan.constraint.start().mask([start, 5, 6, 7]).any()
    res = control_think.generate(plan.prompt + [start], SamplingParams(seed=1, max_tokens=6), DraftParams(),
                                 constraint=reasoning.constrain(found, None, FREE, 3, control_think.n_vocab))
    assert res.tokens[3] == end and "</think>" in res.text
    assert reasoning.split_reasoning(found, FREE, res.text)[0] == _text(control_think, res.tokens[:3]).strip()


def test_markers_spelled_in_several_tokens_are_taken_from_the_template(spelled_open_think, spelled_think, engine):
    """A vocabulary without the markers spells them in bytes: taken when the template mentions
    the opening one (not for the plain pair, whose template does not), as their tokens."""
    for e in (spelled_open_think, spelled_think):
        found = e.reasoning_format()
        assert found.start_ids == tuple(e.target.tokenize("<think>", add_special=False))
        assert len(found.start_ids) == 7 and len(found.end_ids) == 8 and found.shown == ()
    assert engine.reasoning_format() is None
    assert plan_chat(spelled_open_think, MSGS).phase == FREE
    assert plan_chat(spelled_think, MSGS).phase == BEFORE
    assert plan_chat(spelled_think, MSGS, chat_template_kwargs={"enable_thinking": False}).phase == AFTER


@pytest.mark.parametrize("method", ["none", "resispec", "auto"])
def test_a_budget_forces_a_marker_spelled_in_several_tokens(spelled_open_think, method):
    """With a budget of 5 the block's 6th token starts the closing marker's tokens, one after
    the other (unless the model closed it by itself); the split reads the answer after it."""
    e = spelled_open_think
    end = list(e.reasoning_format().end_ids)
    plan = plan_chat(e, MSGS, reasoning_budget=5)
    forced = 0
    for seed in range(4):
        # no memory: each method draws from the seed alone (a repeated seed that reads it draws anew)
        res = e.generate(plan.prompt, SamplingParams(seed=seed, max_tokens=20),
                         DraftParams(method=method, draws=3, use_memory=False), constraint=plan.constraint)
        if res.finish_reason == "eos" and len(res.tokens) <= 5:
            continue  # the reply ended inside the budget (auto's trees, and so its draws, follow the machine)
        assert res.tokens[5:5 + len(end)] == end
        thinking, content = plan.split(res.text)
        assert thinking == _text(e, res.tokens[:5]).strip() and content == _text(e, res.tokens[13:]).lstrip()
        forced += 1
    assert forced >= 2


def test_a_schema_applies_after_a_spelled_marker(spelled_think):
    """The model may open the block (spelled): a JSON schema applies after it closes, and a
    reply that does not open it is JSON from its first token."""
    e = spelled_think
    start, end = list(e.reasoning_format().start_ids), list(e.reasoning_format().end_ids)
    plan = plan_chat(e, MSGS, response_format={"type": "json_object"}, reasoning_budget=2)
    state = plan.constraint.start()
    from resispec_gguf.kernels.sampling import mask_allows

    assert mask_allows(state.mask([]), start[0]) and mask_allows(state.mask([]), e.target.tokenize("{", add_special=False)[0])
    assert state.forced(start + [10, 11]) == end
    for seed in range(2):
        res = e.generate(plan.prompt + start, SamplingParams(seed=seed, max_tokens=60), DraftParams(method="resispec"),
                         constraint=reasoning.constrain(e.reasoning_format(), e.compile_constraint(json_schema=True),
                                                        FREE, 2, e.n_vocab))
        assert res.tokens[2:2 + len(end)] == end
        if res.finish_reason == "eos":
            assert isinstance(json.loads(reasoning.split_reasoning(e.reasoning_format(), FREE, res.text)[1]), dict)


def test_the_markers_looked_for_are_the_formats(monkeypatch, think):
    """One source of truth: the pairs detection looks for are the thinking families' formats'
    ``reasoning``; another pair there is looked for instead (here spelled in bytes, taken as
    the template mentions it)."""
    from resispec_gguf.assist.formats import DeepSeekR1Format, Qwen3Format

    assert reasoning.marker_pairs() == (("<think>", "</think>"),) == (Qwen3Format.reasoning,)
    for cls in (Qwen3Format, DeepSeekR1Format):
        monkeypatch.setattr(cls, "reasoning", ("<|im_start|>", "</x>"))
    found = reasoning.detect_reasoning(think.target, think.chat_template)
    assert (found.start, found.end, found.start_ids) == ("<|im_start|>", "</x>", (tiny_gguf.IM_START_ID,))
    assert len(found.end_ids) == 4
    for cls in (Qwen3Format, DeepSeekR1Format):
        monkeypatch.setattr(cls, "reasoning", ("<reason>", "</reason>"))
    assert reasoning.detect_reasoning(think.target, think.chat_template) is None  # no token, not in the template
