"""``bench --concurrency``: clients sharing the prompts at each level, and the table."""

import pytest

from law_harness import PROMPT, slotted_pair
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.engine import Engine
from resispec_gguf.errors import UserError
from resispec_gguf.bench import concurrency


def test_levels_parse_and_refuse_nonsense():
    assert concurrency.parse_levels("1,2,4,2") == [1, 2, 4]
    for bad in ("", "0", "1,x", "99"):
        with pytest.raises(UserError, match="--concurrency"):
            concurrency.parse_levels(bad)


def test_every_level_does_the_same_work_and_reports_its_figures():
    engine = Engine(*slotted_pair(4))
    workloads = {"fake": [{"prompt": str(i)} for i in range(6)]}
    engine.text_tokens = lambda text: PROMPT + [int(text) % 5]  # prompts as fake tokens
    sp = SamplingParams(temperature=1.0, max_tokens=8, seed=0)
    submit, sent = engine.submit, []

    def recorded(tokens, sp_, dp, constraint=None):
        sent.append(dp.method)
        return submit(tokens, sp_, dp, constraint=constraint)

    engine.submit = recorded
    rows = concurrency.run_concurrency(engine, workloads, [1, 2, 4], ["none", "resispec"], sp,
                                       DraftParams(draws=2, depth=2, budget=4))
    assert [(r["method"], r["clients"]) for r in rows] == [(m, c) for m in ("none", "resispec") for c in (1, 2, 4)]
    for r in rows:
        assert r["requests"] == 6 and r["tokens"] > 0
        assert 0 < r["ttft_p50"] <= r["ttft_p95"] and r["ttft_p50"] <= r["e2e_p50"] <= r["e2e_p95"]
    # the same seeds per prompt at every level, and a fixed shape does not depend on the
    # neighbours: every level emits the same tokens
    assert len({r["tokens"] for r in rows if r["method"] == "resispec"}) == 1
    # each method served the prompts once, untimed, before its levels: no level pays a prefill
    # the others find cached
    assert sent == ["none"] * (6 + 3 * 6) + ["resispec"] * (6 + 3 * 6)
    table = concurrency.format_concurrency(rows)
    assert "agg tok/s" in table and len(table.splitlines()) == 2 + len(rows)
    engine.close()


def test_a_level_past_the_slots_is_refused():
    engine = Engine(*slotted_pair(2))
    with pytest.raises(UserError, match="--parallel 4"):
        concurrency.run_concurrency(engine, {"w": [{"prompt": "a"}]}, [4], ["none"], SamplingParams(), DraftParams())


def test_chat_prompts_are_planned_so_a_reasoning_budget_applies(open_think_pair, monkeypatch):
    """A reasoning model's chat prompts go out as planned chat requests: the budget closes
    every reply's thinking."""
    from resispec_gguf.config import ReasoningParams

    engine = Engine.load(str(open_think_pair[0]), str(open_think_pair[1]), n_ctx=512, n_threads=1, flash_attn=False,
                         progress=False)
    submit, replies = engine.submit, []

    def recorded(tokens, sp, dp, constraint=None):
        ticket = submit(tokens, sp, dp, constraint=constraint)
        replies.append(ticket)
        return ticket

    monkeypatch.setattr(engine, "submit", recorded)
    workloads = {"chat": [{"messages": [{"role": "user", "content": "Think."}]}] * 2}
    try:
        concurrency.run_concurrency(engine, workloads, [1], ["none"], SamplingParams(max_tokens=6, seed=0),
                                    DraftParams(), ReasoningParams(reasoning_budget=2))
        end = engine.reasoning_format().end_ids[0]
        assert len(replies) == 4 and all(end in t.result().tokens[:3] for t in replies)  # 2 untimed first
    finally:
        engine.close()


def test_shared_clients_send_each_item_once_and_raise_a_clients_error():
    records, wall = concurrency.shared_clients(list(range(7)), 3, lambda x: x * 10)
    assert sorted(records) == [x * 10 for x in range(7)] and wall >= 0

    def send(x):
        if x == 4:
            raise ValueError("item 4 failed")
        return x

    with pytest.raises(ValueError, match="item 4 failed"):
        concurrency.shared_clients(list(range(7)), 3, send)
