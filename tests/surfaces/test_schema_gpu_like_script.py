"""scripts/schema_gpu_like.py (issue #29's speed figure in GPU-like modelled time): its
clock prices each decode by the rows it holds and leaves the prompt's prefill out, and a
short run on the tiny pair prints every variant.  Never a speed."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("llama_cpp")

from script_loader import load_script
sgl = load_script("schema_gpu_like")


def test_a_generation_is_priced_without_its_prompt():
    calls = [("target", "sync", 5.0), ("draft", "sync", 1.0), ("draft", "tree", 0.25), ("target", "tree", 2.0),
             ("draft", "sync", 0.5), ("target", "tree", 2.0)]
    # each model's first sync is the prompt's prefill; a later draft sync is a re-sync the step pays
    assert sgl.generation_seconds(calls) == pytest.approx(4.75)


def test_the_clock_prices_the_rows_each_decode_holds():
    class Model:
        def decode_slots(self, tokens, parents, slots, want_logits=None):
            return len(tokens)

        def sync_slot(self, slot, tokens):
            return 2  # two tokens already cached

    m, calls = Model(), []
    sgl.clock(m, "draft", lambda rows: 10.0 * rows, calls)
    assert m.decode_slots([1, 2, 3], [-1, 0, 1], None) == 3
    assert m.sync_slot(0, [5, 6, 7, 8, 9]) == 2  # rows decoded: 5 - 1 (the root waits) - 2 cached
    assert calls == [("draft", "tree", 30.0), ("draft", "sync", 20.0)]


def test_a_short_run_on_the_tiny_pair_prints_every_variant(tiny_pair, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RESISPEC_COSTS", str(tmp_path / "costs.json"))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "hello"}) + "\n" + json.dumps({"prompt": "abc"}) + "\n")
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}))
    out = tmp_path / "r.json"
    rc = sgl.main(["--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), "--prompts", str(prompts),
                   "--schema", str(schema), "--methods", "chain,auto", "--max-tokens", "6", "--threads", "1",
                   "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    for variant in ("none", "none+schema", "chain", "chain+schema", "auto", "auto+schema"):
        assert f"  {variant} " in text
    report = json.loads(out.read_text())
    assert set(report["tables"]) == {"with_host", "decode_only"}
    assert all(len(runs) == 2 for runs in report["runs"].values())


def test_bad_flags_are_one_line(capsys):
    assert sgl.main(["--target-ms", "fast"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--target-ms takes FIXED_MS,PER_ROW_MS" in err
