"""bench/analyze surfaces and the auto cost model."""

import json

import pytest

from resispec_gguf import autotune, bench
from resispec_gguf.api import create_chat_completion
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.engine import Engine
from resispec_gguf.errors import UserError


# --------------------------------------------------------------------------- prompt files


def test_prompt_file_parser(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "a"}\n\n{"messages": [{"role": "user", "content": "b"}], "kind": "x"}\n')
    items = bench.parse_prompts(str(f))
    assert items[0]["prompt"] == "a" and items[1]["messages"][0]["content"] == "b" and items[1]["kind"] == "x"


@pytest.mark.parametrize(
    "body,needle",
    [
        ('{"prompt": "ok"}\n{oops\n', ":2: not valid JSON"),
        ('{"prompt": "ok"}\n[1, 2]\n', ":2: expected an object"),
        ('{"prompt": ""}\n', ":1: expected a non-empty"),
        ('{"messages": [{"role": "user"}]}\n', ":1: every message"),
        ("\n\n", "no prompts"),
    ],
)
def test_prompt_file_errors_name_the_line(tmp_path, body, needle):
    f = tmp_path / "p.jsonl"
    f.write_text(body)
    with pytest.raises(UserError, match=needle):
        bench.parse_prompts(str(f))
    with pytest.raises(UserError, match="cannot read"):
        bench.parse_prompts(str(tmp_path / "missing.jsonl"))


def test_parse_methods():
    assert bench.parse_methods("resispec,chain") == ["none", "resispec", "chain"]
    with pytest.raises(UserError, match="unknown method"):
        bench.parse_methods("none,fast")


def test_cost_curve_cache_roundtrip(tmp_path):
    curve = autotune.measure_curve(lambda n: None, rows=(1, 2, 4), repeats=1)
    assert list(curve.rows) == [1, 2, 4] and all(b >= a for a, b in zip(curve.seconds, curve.seconds[1:]))
    cache = str(tmp_path / "c.json")
    key = autotune.curve_cache_key('["m.gguf", 1, 2]')
    assert key != autotune.curve_cache_key('["m.gguf", 1, 3]')
    assert autotune.load_cached_curve(cache, key) is None
    autotune.store_cached_curve(cache, key, curve)
    assert autotune.load_cached_curve(cache, key) == curve
    assert curve(3) == pytest.approx((curve.seconds[1] + curve.seconds[2]) / 2)


# --------------------------------------------------------------------------- on the tiny pair


@pytest.fixture(scope="module")
def engine(tiny_pair):
    with Engine.load(str(tiny_pair[0]), str(tiny_pair[1]), n_ctx=512, progress=False, n_threads=1) as e:
        yield e


def test_bench_report_schema(engine):
    workloads = {"code": bench.WORKLOADS["code"][:2], "chat": bench.WORKLOADS["chat"][:2]}
    results = bench.run_bench(
        engine, workloads, ["none", "resispec", "auto"], [1.0, 0.0],
        SamplingParams(max_tokens=16, seed=0), DraftParams(), progress=False,
    )
    assert [(b["workload"], b["temperature"]) for b in results] == [("code", 1.0), ("code", 0.0), ("chat", 1.0), ("chat", 0.0)]
    keys = {"tokens_per_s", "speedup_vs_none", "tau", "accept_by_depth", "acceptance_rate", "nodes_per_step",
            "draft_ms_per_step", "target_ms_per_step", "overhead_ms_per_step", "overhead_fraction", "tokens", "runs"}
    for block in results:
        assert set(block["methods"]) == {"none", "resispec", "auto"}
        for m in block["methods"].values():
            assert keys <= set(m) and m["runs"] == 2
        assert block["methods"]["none"]["speedup_vs_none"] == pytest.approx(1.0)
        assert block["methods"]["resispec"]["nodes_per_step"] > 0
    json.dumps(results)
    table = bench.format_table(results)
    assert "resispec" in table and "workload: code" in table and "workload: chat" in table


def test_analyze_table(engine):
    out = bench.analyze(engine, bench.WORKLOADS["chat"][:1], [1.0], [1, 4], max_tokens=12, cap=0, rrs_samples=50, progress=False)
    row = out[0]["by_k"]
    assert row[1]["specinfer"] == pytest.approx(row[1]["resispec"])
    assert row[4]["specinfer"] <= row[4]["resispec"] + 1e-12 <= row[4]["optimal"] + 2e-12
    assert 1.0 <= row[4]["distinct"] <= 4.0
    assert "alpha*" in bench.format_analysis(out)


def test_create_chat_completion_shapes(engine):
    msgs = [{"role": "user", "content": "Hi"}]
    out = create_chat_completion(engine, msgs, temperature=0.0, max_tokens=8)
    assert out["object"] == "chat.completion"
    assert out["choices"][0]["message"]["role"] == "assistant"
    assert out["usage"]["completion_tokens"] == out["speculative"]["tokens"]
    chunks = list(create_chat_completion(engine, msgs, temperature=0.0, max_tokens=8, stream=True))
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == out["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_workload_selection():
    assert list(bench.select_prompts(None, "edit,code")) == ["edit", "code"]
    assert all(6 <= len(bench.WORKLOADS[w]) <= 8 for w in ("code", "edit", "chat"))
    with pytest.raises(UserError, match="unknown workload"):
        bench.select_prompts(None, "code,poetry")
