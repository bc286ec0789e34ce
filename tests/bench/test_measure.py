"""bench/analyze: prompt files, workloads, the report and the analysis table."""

import json

import pytest

from resispec_gguf.bench import measure as bench
from resispec_gguf.config import DraftParams, ModelParams, SamplingParams
from resispec_gguf.engine import Stats
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


# --------------------------------------------------------------------------- on the tiny pair


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
            assert m["prompt_reused"] == 0  # interleaved, each run starts cold: no method finds the last one's prompt
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


def test_workload_selection():
    assert list(bench.select_prompts(None, "edit,code")) == ["edit", "code"]
    assert all(6 <= len(bench.WORKLOADS[w]) <= 8 for w in ("code", "edit", "chat"))
    with pytest.raises(UserError, match="unknown workload"):
        bench.select_prompts(None, "code,poetry")


def test_summary_is_the_merged_stats():
    a = Stats(method="resispec", tokens=10, steps=4, target_calls=4, tree_nodes=20, accepted_by_depth=[3, 1],
              reached_by_depth=[4, 3], draft_time=0.2, target_time=0.4, total_time=1.0)
    b = Stats(method="resispec", tokens=6, steps=2, target_calls=2, tree_nodes=8, accepted_by_depth=[2, 0, 0],
              reached_by_depth=[2, 2, 1], draft_time=0.1, target_time=0.2, total_time=0.5)
    row = bench.summarise([((0, 0), a), ((0, 1), b)], {(0, 0): 5.0, (0, 1): 6.0})
    assert row["tau"] == pytest.approx(16 / 6) and row["tokens"] == 16 and row["runs"] == 2
    assert row["accept_by_depth"] == [pytest.approx(5 / 6), pytest.approx(1 / 5), 0.0]
    assert row["acceptance_rate"] == pytest.approx(6 / 12)
    assert row["nodes_per_step"] == pytest.approx(28 / 6)
    assert row["overhead_ms_per_step"] == pytest.approx(1000 * 0.6 / 6)
    assert row["speedup_vs_none"] == pytest.approx(((10 / 1.0) / 5.0 + (6 / 0.5) / 6.0) / 2)
    none = bench.summarise([((0, 0), Stats(tokens=3, steps=3, target_calls=3, total_time=1.0))], {(0, 0): 3.0})
    assert none["acceptance_rate"] is None and none["accept_by_depth"] == []


def test_bench_command_writes_the_report(engine, tmp_path, capsys):
    out = tmp_path / "bench.json"
    report = bench.bench_command(engine, ModelParams(target="t.gguf", draft="d.gguf"), {"code": bench.WORKLOADS["code"][:1]},
                                 ["none", "chain"], [0.0], SamplingParams(max_tokens=4, seed=0), DraftParams(),
                                 json_path=str(out))
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert report["config"]["target"] == "t.gguf" and report["config"]["n_ctx"] == engine.n_ctx
    info = engine.info()
    assert report["models"]["target"]["path"] == info["target"]["path"]
    assert report["models"]["draft"]["sha256"] == bench.model_info(info["draft"]["path"])["sha256"]
    machine = report["machine"]
    assert machine["llama_cpp_python"] == info["target"]["llama_cpp_python"] and machine["threads"] == 1
    assert machine["devices"] == {"target": ["CPU"], "draft": ["CPU"]}  # where llama.cpp put the layers
    assert "chain" in capsys.readouterr().out


def test_analyze_command_needs_a_draft(tiny_pair):
    from resispec_gguf.engine import Engine

    with Engine.load(str(tiny_pair[0]), "", n_ctx=128, n_threads=1, progress=False) as e:
        with pytest.raises(UserError, match="needs a draft"):
            bench.analyze_command(e, ModelParams(), bench.WORKLOADS["chat"][:1], [1.0], [1], max_tokens=2, cap=0, seed=0)


# --------------------------------------------------------------------------- bench --sweep


def test_sweep_grid_is_the_issue_s_grid():
    full = dict(bench.sweep_grid("full", DraftParams(draft_support=32)))
    assert len(full) == 1 + 8 + 3 + 24 + 1 and list(full)[0] == "none" and list(full)[-1] == "auto"
    assert {(d.depth, d.lookup) for d in full.values() if d.method == "chain" and d.use_draft} == \
        {(depth, look) for depth in (1, 2, 3, 5) for look in (False, True)}
    lookups = [d for d in full.values() if not d.use_draft]
    assert [(d.method, d.depth, d.lookup) for d in lookups] == [("chain", n, True) for n in (4, 8, 16)]
    assert {(d.draws, d.depth, d.budget, d.lookup) for d in full.values() if d.method == "resispec"} == \
        {(k, depth, b, look) for k in (2, 4) for depth in (3, 5) for b in (8, 16, 32) for look in (False, True)}
    assert all(d.draft_support == 32 for d in full.values())  # what the grid does not set is the user's
    quick = dict(bench.sweep_grid("quick", DraftParams()))
    assert set(quick) < set(full) and "auto" in quick and "lookup-8" in quick
    with pytest.raises(UserError, match="unknown sweep"):
        bench.sweep_grid("huge", DraftParams())


def test_reproduce_command_names_what_differs():
    grid = dict(bench.sweep_grid("full", DraftParams()))
    model = ModelParams(target="t.gguf", draft="d.gguf", n_threads=1)
    cmd = bench.reproduce_command(model, SamplingParams(top_k=0), grid["resispec-K4d5b32+lk"], 0.6)
    assert cmd == ("python -m resispec_gguf generate --target t.gguf --draft d.gguf --threads 1 --temp 0.6 --top-k 0 "
                   "--method resispec --draws 4 --depth 5 --budget 32 --lookup")
    cmd = bench.reproduce_command(model, SamplingParams(), grid["lookup-16"], 0.8)
    assert "--draft ''" in cmd and cmd.endswith("--method chain --depth 16 --budget 16 --lookup")
    assert bench.reproduce_command(model, SamplingParams(), grid["none"], 0.8).endswith("--threads 1 --method none")
    # the flags parse back into the same settings
    from resispec_gguf.surfaces import cli, flags
    import shlex

    args = cli.build_parser().parse_args(shlex.split(cmd)[3:])
    assert flags.from_args(DraftParams, args) == grid["lookup-16"].replace(use_draft=True)
    assert flags.from_args(ModelParams, args).draft == ""


def test_sweep_runs_every_setting_and_names_the_best(engine, capsys):
    report = bench.bench_command(engine, ModelParams(target="t.gguf", draft="d.gguf"),
                                 {"code": bench.WORKLOADS["code"][:2]}, None, [0.8],
                                 SamplingParams(max_tokens=6, seed=0), DraftParams(), sweep="quick")
    names = [n for n, _ in bench.sweep_grid("quick", DraftParams())]
    assert report["config"]["methods"] == names and set(report["config"]["settings"]) == set(names)
    (block,) = report["results"]
    assert list(block["methods"]) == names and "runs" not in block
    best = block["best"]
    fixed = {n: m["speedup_vs_none"] for n, m in block["methods"].items() if n != "auto"}
    assert best["setting"] in fixed and best["speedup_vs_none"] == max(fixed.values())
    assert best["auto_vs_none"] == block["methods"]["auto"]["speedup_vs_none"] and best["auto_vs_best"] > 0
    assert best["command"].startswith("python -m resispec_gguf generate --target t.gguf")
    # lookup alone never called the draft model, though one is loaded
    assert block["methods"]["lookup-8"]["draft_ms_per_step"] == 0.0
    out = capsys.readouterr().out
    assert "best fixed setting" in out and best["command"] in out


def test_sweep_without_a_draft_keeps_what_runs(tiny_pair):
    from resispec_gguf.engine import Engine

    with Engine.load(str(tiny_pair[0]), "", n_ctx=256, n_threads=1, progress=False) as e:
        results, params = bench.run_sweep(e, {"code": bench.WORKLOADS["code"][:1]}, "quick", [1.0],
                                          SamplingParams(max_tokens=4, seed=0), DraftParams(), progress=False)
    assert list(params) == ["none", "lookup-8", "auto"]


@pytest.fixture(scope="module")
def open_think(open_think_pair):
    """A tiny reasoning model whose template opens the thinking block."""
    from resispec_gguf.engine import Engine

    with Engine.load(str(open_think_pair[0]), str(open_think_pair[1]), n_ctx=512, n_threads=1, flash_attn=False,
                     progress=False) as e:
        yield e


def test_chat_prompts_run_as_planned_so_a_reasoning_budget_applies(open_think, engine, monkeypatch):
    """bench plans its chat prompts as chat requests: on a reasoning model every run (warm-up,
    each method, each schema variant) closes the thinking at the budget, the schema applying
    after it; a plain prompt, and every prompt of a model that does not think, run as before."""
    from resispec_gguf.config import ReasoningParams

    chat, code = bench.WORKLOADS["chat"][0], bench.WORKLOADS["code"][0]
    tokens, plan = bench.prompt_plan(engine, chat, ReasoningParams(reasoning_budget=2))
    assert tokens == engine.chat_tokens(chat["messages"]) and bench.as_run(plan, None) is None
    assert bench.prompt_plan(open_think, code) == (open_think.text_tokens(code["prompt"]), None)
    end = open_think.reasoning_format().end_ids[0]
    replies = []
    generate = open_think.generate

    def recorded(prompt, sp, dp, constraint=None):
        res = generate(prompt, sp, dp, constraint=constraint)
        replies.append((constraint is not None, res.tokens))
        return res

    monkeypatch.setattr(open_think, "generate", recorded)
    schema = open_think.compile_constraint(json_schema={"type": "object"})
    bench.run_bench(open_think, {"chat": [chat]}, ["none", "resispec"], [1.0], SamplingParams(max_tokens=8, seed=0),
                    DraftParams(), progress=False, constraint=schema, reasoning=ReasoningParams(reasoning_budget=3))
    assert len(replies) == 4 + 4 and all(constrained for constrained, _ in replies)
    assert all(end in toks[:4] for _, toks in replies)
    replies.clear()
    bench.run_bench(open_think, {"chat": [chat]}, ["none"], [1.0], SamplingParams(max_tokens=8, seed=0), DraftParams(),
                    progress=False)
    assert replies and not any(constrained for constrained, _ in replies)  # no budget, no schema: free text


class _Failing:
    """A constraint whose mask fails at the third token: each reply under it ends in an error."""

    def start(self):
        return _FailingState()


class _FailingState:
    def __init__(self):
        self.n = 0

    def mask(self, path):
        import numpy as np
        from resispec_gguf.errors import ConstraintError

        if self.n + len(path) >= 2:
            raise ConstraintError("the test's constraint gave up")
        return np.full(64, -1, np.int32)

    def advance(self, tokens):
        self.n += len(tokens)

    def is_stopped(self):
        return False


def test_replies_ended_by_an_error_are_named_under_the_table(engine):
    """A method whose replies stop at an error would look fast or slow for the wrong reason:
    the table says how many did and why."""
    workloads = {"code": bench.WORKLOADS["code"][:2]}
    variants = [("none", DraftParams(method="none"), None), ("failing", DraftParams(method="none"), _Failing())]
    results = bench.run_variants(engine, workloads, variants, [0.0], SamplingParams(max_tokens=8, seed=0),
                                 progress=False)
    m = results[0]["methods"]
    assert m["none"]["errors"] == 0 and m["failing"]["errors"] == 2
    table = bench.format_table(results)
    assert "failing: 2 of 2 replies ended in an error, the first: the test's constraint gave up" in table
    assert "none: 0 of" not in table


def test_the_copy_ceiling_line_reads_the_engines_target_curve():
    from types import SimpleNamespace

    from resispec_gguf.decoding.costs import CostCurve

    curve = CostCurve((1, 2, 4, 8, 16), (1.0, 1.56, 1.56 * 1.0, 2.74, 3.75))
    engine = SimpleNamespace(_auto_curves=lambda: (curve, None))
    line = bench.copy_ceiling_line(engine)
    assert line.startswith("perfect-copy ceiling on this machine: 4.27x") and "16-row decode costs 3.75x" in line
    assert bench.copy_ceiling_line(SimpleNamespace()) == ""


def test_pooled_speeds_weigh_each_reply_by_its_length():
    """Two prompts: the method is 2x on a 10-token reply and 1x on a 90-token one.  The median
    of per-prompt ratios says 1.5x; pooled, the 100 tokens take 50 s against 55 s: 1.1x."""
    base = [((0, 0), Stats(tokens=10, total_time=10.0, prompt_time=1.0)),
            ((0, 1), Stats(tokens=90, total_time=45.0, prompt_time=1.0))]
    mine = [((0, 0), Stats(tokens=10, total_time=5.0, prompt_time=1.0)),
            ((0, 1), Stats(tokens=90, total_time=45.0, prompt_time=1.0))]
    pooled = bench.pooled_vs(mine, base)
    assert pooled["pooled_vs_none"] == pytest.approx((100 / 50.0) / (100 / 55.0))
    assert pooled["end_to_end_pooled_vs_none"] == pytest.approx((100 / 52.0) / (100 / 57.0))
    assert bench.pooled_vs(mine, []) == {"pooled_vs_none": None, "end_to_end_pooled_vs_none": None}
    rec = bench.request_record((0, 1), mine[1][1], 2.0, None)
    assert (rec["repeat"], rec["prompt"], rec["tokens"]) == (0, 1, 90)
    assert rec["vs_none"] == pytest.approx(1.0) and rec["end_to_end_vs_none"] is None


def test_a_sampled_block_prints_its_pooled_speeds(engine, capsys):
    results = bench.run_bench(engine, {"code": bench.WORKLOADS["code"][:2]}, ["none", "chain"], [0.0, 0.8],
                              SamplingParams(max_tokens=6, seed=0), DraftParams(), progress=False)
    greedy, sampled = results
    chain = sampled["methods"]["chain"]
    assert [(r["repeat"], r["prompt"]) for r in chain["requests"]] == [(0, 0), (0, 1)]
    assert chain["pooled_vs_none"] > 0 and sum(r["tokens"] for r in chain["requests"]) == chain["tokens"]
    text = bench.format_table(results)
    assert text.count("pooled (total tokens over total time): chain ") == 1  # the sampled block only
    assert "T=0.8 pooled" in text.split("\n\n")[1]  # below the table, not among its rows
