"""bench --pairs: the fidelity maths against naive references, the Pareto front, the model
pool, and a 2 targets x 2 drafts run on tiny models (one pair refused) checked against the
report's JSON schema."""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys

import jsonschema
import numpy as np
import pytest

import tiny_gguf
from resispec_gguf.config import DraftParams, ModelParams, SamplingParams
from resispec_gguf.errors import UserError
from resispec_gguf.llama import backend
from resispec_gguf.llama.loading import ModelPool
from resispec_gguf.bench import pairs
from resispec_gguf.surfaces import cli

SMALL = dict(n_ctx=256, n_threads=1, flash_attn=False)


# --------------------------------------------------------------------------- fidelity


def _naive_kl(p_logits, q_logits) -> float:
    p = np.exp(p_logits - p_logits.max())
    p /= p.sum()
    q = np.exp(q_logits - q_logits.max())
    q /= q.sum()
    return float(sum(pi * math.log(pi / qi) for pi, qi in zip(p, q) if pi > 0))


def test_a_row_against_itself_has_kl_exactly_0_and_agrees():
    rows = np.random.default_rng(0).normal(scale=4.0, size=(7, 300)).astype(np.float32)  # [n, V]
    kl, top1 = pairs.fidelity(rows, rows.copy(), chunk=3)
    assert kl.tolist() == [0.0] * 7 and top1.all()
    summary = pairs.fidelity_summary(kl, top1)
    assert summary == {"kl_mean": 0.0, "kl_p99": 0.0, "top1": 1.0, "positions": 7}


def test_kl_matches_a_naive_sum_and_a_closed_form():
    rng = np.random.default_rng(1)
    ref, tgt = rng.normal(scale=3.0, size=(2, 5, 40))  # [n, V] each
    kl, top1 = pairs.fidelity(ref, tgt, chunk=2)
    assert kl == pytest.approx([_naive_kl(a, b) for a, b in zip(ref, tgt)], rel=1e-10)
    assert top1.tolist() == (ref.argmax(1) == tgt.argmax(1)).tolist()
    # p = (1/2, 1/2), q = (0.9, 0.1)
    kl, top1 = pairs.fidelity(np.log([[0.5, 0.5]]), np.log([[0.9, 0.1]]))
    assert kl[0] == pytest.approx(0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1), rel=1e-12)


def test_kl_is_the_reference_against_the_target_not_the_other_way():
    p, q = np.log([[0.7, 0.2, 0.1]]), np.log([[0.2, 0.2, 0.6]])
    forward, backward = pairs.fidelity(p, q)[0][0], pairs.fidelity(q, p)[0][0]
    assert forward == pytest.approx(_naive_kl(p[0], q[0])) and forward != pytest.approx(backward)


def test_vocabularies_of_different_sizes_compare_on_the_common_tokens():
    rng = np.random.default_rng(2)
    ref = rng.normal(size=(3, 20))
    tgt = np.concatenate([ref, rng.normal(size=(3, 5))], axis=1)  # 5 more tokens, same first 20 logits
    kl, top1 = pairs.fidelity(ref, tgt)
    assert kl.tolist() == [0.0] * 3 and top1.all()


def test_a_token_the_reference_rules_out_adds_nothing():
    ref = np.array([[0.0, -np.inf, 1.0]])
    tgt = np.array([[0.0, 5.0, 1.0]])
    kl, _ = pairs.fidelity(ref, tgt)
    p = np.exp([0.0, 1.0]) / np.exp([0.0, 1.0]).sum()
    q = np.exp([0.0, 5.0, 1.0]) / np.exp([0.0, 5.0, 1.0]).sum()
    assert np.isfinite(kl[0]) and kl[0] == pytest.approx(p[0] * math.log(p[0] / q[0]) + p[1] * math.log(p[1] / q[2]))


def test_fidelity_refuses_rows_that_do_not_line_up():
    with pytest.raises(ValueError, match="equal n"):
        pairs.fidelity(np.zeros((3, 4)), np.zeros((2, 4)))


def test_summary_pools_positions():
    kl = np.arange(101, dtype=float)
    top1 = np.array([True] * 75 + [False] * 26)
    s = pairs.fidelity_summary(kl, top1)
    assert s["kl_mean"] == 50.0 and s["kl_p99"] == pytest.approx(99.0) and s["top1"] == pytest.approx(75 / 101)
    assert pairs.fidelity_summary(np.zeros(0), np.zeros(0)) == {"kl_mean": None, "kl_p99": None, "top1": None,
                                                                 "positions": 0}


def test_pareto_front():
    points = [(10.0, 0.1), (5.0, 0.0), (4.0, 0.05), (10.0, 0.2), (12.0, None), (3.0, 0.0)]
    assert pairs.pareto_front(points) == {0, 1}
    assert pairs.pareto_front([(1.0, 0.5), (1.0, 0.5)]) == {0, 1}  # ties dominate neither
    assert pairs.pareto_front([]) == set()


# --------------------------------------------------------------------------- inputs, names, memory


def test_model_lists_and_pairs():
    assert pairs.parse_models(" a.gguf, b.gguf,,a.gguf ") == ["a.gguf", "b.gguf"]
    assert pairs.parse_models("") == [] and pairs.parse_models(None) == []
    assert pairs.pair_list(["t1", "t2"], ["d1", "d2"]) == [("t1", ["d1", "d2"]), ("t2", ["d1", "d2"])]
    # no --draft: a preset brings its own, a path none; --draft '': none
    assert pairs.pair_list(["default", "x/t.gguf"], None) == [("default", ["default"]), ("x/t.gguf", [])]
    assert pairs.pair_list(["default"], []) == [("default", [])]


def test_short_names_tell_apart_files_of_the_same_name():
    names = pairs.short_names(["/m/a/target.gguf", "/m/b/target.gguf", "/m/a/draft.gguf", "default"])
    assert names == {"/m/a/target.gguf": "a/target.gguf", "/m/b/target.gguf": "b/target.gguf",
                     "/m/a/draft.gguf": "draft.gguf", "default": "default"}


def test_peak_rss_sees_memory_touched_after_the_reset():
    """In a fresh process: in this one, memory the suite freed may still be resident and
    counted, so a new block need not raise the peak."""
    import subprocess
    import sys

    code = ("import numpy as np\nfrom resispec_gguf.bench import pairs\n"
            "source = pairs.reset_peak_rss()\nassert source in ('VmHWM', 'ru_maxrss')\n"
            "before = pairs.peak_rss_mb(source)\nblock = np.ones(48 << 20, dtype=np.uint8)\n"
            "after = pairs.peak_rss_mb(source)\n"
            "assert int(block[-1]) == 1 and after >= before + (40 if source == 'VmHWM' else 0) and before > 0, "
            "(source, before, after)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]


# --------------------------------------------------------------------------- the pool


def test_the_pool_opens_each_file_once_per_role(tiny_pair):
    pool = ModelPool(ModelParams(**SMALL), progress=False)
    try:
        other_spelling = str(tiny_pair[0].parent / ".." / tiny_pair[0].parent.name / tiny_pair[0].name)
        target = pool.get(str(tiny_pair[0]), "target")
        assert isinstance(target, backend.LlamaModel) and pool.get(other_spelling, "target") is target
        as_draft = pool.get(str(tiny_pair[0]), "draft")
        assert as_draft is not target  # a model of its own, with its own cache
        t, d = pool.pair(str(tiny_pair[0]), str(tiny_pair[1]))
        assert t is target and d is pool.get(str(tiny_pair[1]), "draft")
        assert pool.mismatch(str(tiny_pair[0]), str(tiny_pair[1])) is None
    finally:
        pool.close()
    assert pool.get(str(tiny_pair[0]), "target") is not target  # opened again after close
    pool.close()


def test_the_pool_refuses_a_bad_file_once_and_remembers(not_gguf_file, tiny_pair, incompatible_draft):
    calls = []

    def opener(path, **settings):
        calls.append(path)
        return backend.LlamaModel(path, **settings)

    pool = ModelPool(ModelParams(**SMALL), progress=False, open_model=opener)
    try:
        for _ in range(2):
            with pytest.raises(UserError, match="not a GGUF file|could not load"):
                pool.get(str(not_gguf_file), "draft")
        assert calls == [str(not_gguf_file)]
        with pytest.raises(UserError, match="model file not found"):
            pool.get("/nonexistent/x.gguf", "target")
        with pytest.raises(UserError, match="draft model is incompatible with the target: token 5 differs"):
            pool.pair(str(tiny_pair[0]), str(incompatible_draft))
    finally:
        pool.close()


# --------------------------------------------------------------------------- a 2 x 2 run


@pytest.fixture(scope="module")
def two_by_two(tiny_pair, tmp_path_factory):
    """Targets: the tiny target and one with 100 more tokens (another seed); drafts: one with
    100 more tokens and one with 200 more, within llama.cpp's 128 of the second target but not
    of the first.  So 3 pairs run on one vocabulary and 1 on the text route (it was refused
    before drafts of another vocabulary ran); the reference is the first target.  (Each
    draft has at least its target's tokens: the engine feeds the draft what the target writes.)"""
    tmp = tmp_path_factory.mktemp("pairs")
    extra = tuple(f"<extra_{i}>" for i in range(100))  # the ids and texts of the 200-token draft's first 100
    big_target = tiny_gguf.write_tiny_llama(tmp / "big_target.gguf", seed=5, extra_tokens=extra)
    draft = tiny_gguf.write_tiny_llama(tmp / "draft.gguf", seed=6, base_seed=5, noise=tiny_gguf.DEFAULT_DRAFT_NOISE,
                                       extra_tokens=extra)
    big_draft = tiny_gguf.write_incompatible_draft(tmp, kind="vocab_size")
    targets, drafts = [str(tiny_pair[0]), str(big_target)], [str(draft), str(big_draft)]
    model = ModelParams(target=",".join(targets), draft=",".join(drafts), **SMALL)
    workloads = {"prompts": [{"kind": "prompt", "prompt": "def add(a, b):"},
                             {"kind": "chat", "messages": [{"role": "user", "content": "Say hi."}]}]}
    json_path = tmp / "pairs.json"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        report = pairs.pairs_command(model, workloads, [0.0], SamplingParams(max_tokens=6, seed=0), DraftParams(),
                                     reference=targets[0], json_path=str(json_path), progress=False)
    return report, out.getvalue(), json.loads(json_path.read_text()), targets, drafts


def test_two_by_two_gives_four_pairs_and_two_plain_rows_one_pair_on_the_text_route(two_by_two):
    report, table, _, targets, drafts = two_by_two
    rows = [r for r in report["pairs"] if "error" not in r]
    assert [(r["target"], r["draft"]) for r in rows] == [
        (targets[0], None), (targets[0], drafts[0]), (targets[0], drafts[1]), (targets[1], None),
        (targets[1], drafts[0]), (targets[1], drafts[1])]
    assert [r["method"] for r in rows] == ["none", "auto", "auto", "none", "auto", "auto"]
    assert [r["route"] for r in rows] == [None, "same", "text", None, "same", "same"]
    assert not [r for r in report["pairs"] if "error" in r]
    lines = table.strip().splitlines()
    assert len(lines) == 2 + 6 and "target.gguf + incompatible_vocab_size.gguf (text)" in table
    for r in rows:
        assert r["tokens_per_s"] > 0 and r["rss_mb"] > 0 and r["target_bytes"] > 0
        assert (r["draft_bytes"] is None) == (r["draft"] is None)
        if r["draft"] is None:
            assert r["speedup_vs_plain"] == pytest.approx(1.0) and r["tau"] == pytest.approx(1.0)
        else:
            assert r["tau"] >= 1.0 and r["accept_by_depth"]


def test_fidelity_of_the_reference_itself_is_exact(two_by_two):
    report, _, _, targets, _ = two_by_two
    for r in report["pairs"]:
        if "error" in r:
            continue
        if r["target"] == targets[0]:
            assert (r["kl_mean"], r["kl_p99"], r["top1"]) == (0.0, 0.0, 1.0)
        else:  # another model: the distributions differ
            assert r["kl_mean"] > 0 and r["kl_p99"] > 0 and 0 <= r["top1"] <= 1
    assert report["reference"]["model"] == targets[0] and report["reference"]["positions"] >= 2


def test_the_json_report_matches_its_schema(two_by_two):
    report, _, written, _, _ = two_by_two
    jsonschema.validate(written, pairs.REPORT_SCHEMA)
    assert written == json.loads(json.dumps(report))
    with pytest.raises(jsonschema.ValidationError):  # the schema does refuse what it should
        jsonschema.validate({**written, "pairs": [{"target": "t", "draft": None}]}, pairs.REPORT_SCHEMA)


def test_a_target_that_does_not_load_is_a_row_per_pair(not_gguf_file, tiny_pair):
    pool = ModelPool(ModelParams(**SMALL), progress=False)
    report = pairs.run_pairs(pool, [(str(not_gguf_file), [str(tiny_pair[1])])], {"p": [{"prompt": "x"}]}, [1.0],
                             SamplingParams(max_tokens=2), DraftParams(), progress=False)
    assert [(r["draft"], "error" in r) for r in report["pairs"]] == [(None, True), (str(tiny_pair[1]), True)]
    jsonschema.validate(report, pairs.REPORT_SCHEMA)
    assert "refused not_a_model.gguf (plain): " in pairs.format_pairs(report)


# --------------------------------------------------------------------------- the command line


@pytest.mark.parametrize("argv,line", [
    (["--reference", "r.gguf"], "--reference needs --pairs"),
    (["--pairs", "--methods", "chain"], "--pairs runs plain and auto per pair: no --methods"),
    (["--pairs", "--sweep", "quick"], "--pairs runs plain and auto per pair: no --sweep"),
])
def test_what_pairs_cannot_run_with_is_one_line(argv, line, tiny_pair, capsys):
    rc = cli.main(["bench", "--target", str(tiny_pair[0]), *argv])
    assert rc == 2 and capsys.readouterr().err.splitlines() == [f"resispec-gguf: error: {line}"]


def test_plot_needs_matplotlib_and_a_reference(monkeypatch, capsys, tmp_path, tiny_pair):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    rc = cli.main(["bench", "--pairs", "--target", "/nonexistent/t.gguf", "--plot", str(tmp_path / "p.png")])
    assert rc == 2 and capsys.readouterr().err.splitlines() == [
        "resispec-gguf: error: --plot needs matplotlib: pip install -e '.[plot]'"]
    monkeypatch.undo()
    pytest.importorskip("matplotlib")
    with pytest.raises(UserError, match="give --reference"):
        pairs.pairs_command(ModelParams(target=str(tiny_pair[0])), {}, [1.0], SamplingParams(), DraftParams(),
                            plot_path=str(tmp_path / "p.png"))


def test_the_plot_draws_speed_against_fidelity(two_by_two, tmp_path):
    pytest.importorskip("matplotlib")
    report = two_by_two[0]
    pairs.plot_pairs(report, str(tmp_path / "pairs.png"))
    assert (tmp_path / "pairs.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_missing_reference_is_one_line(tiny_pair, capsys):
    rc = cli.main(["bench", "--pairs", "--target", str(tiny_pair[0]), "--draft", "", "--threads", "1",
                   "--reference", "/nonexistent/ref.gguf", "--workload", "chat", "-n", "2"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("resispec-gguf: error")]
    assert rc == 2 and err == ["resispec-gguf: error: model file not found: /nonexistent/ref.gguf"]
