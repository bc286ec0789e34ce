"""scripts/host_bench.py (issue #28) on tiny random models: every shape runs through the real
backend and its split of the host time is complete (the parts sum to the total, none is
negative, each part a shape must pay is there).  Never a time."""

from __future__ import annotations


import pytest

from script_loader import load_script
host_bench = load_script("host_bench")

_SPECULATIVE = ("batch", "kv", "rows+p", "draws", "tree", "verify", "commit")


@pytest.fixture(scope="module")
def rows(tmp_path_factory, monkeypatch_module):
    monkeypatch_module.setenv("RESISPEC_COSTS", str(tmp_path_factory.mktemp("costs") / "costs.json"))
    return host_bench.run([1024], tokens=6, reps=1, threads=1, seed=0, folder=tmp_path_factory.mktemp("models"),
                          prompt_len=12)


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_every_shape_is_measured(rows):
    assert [r["shape"] for r in rows] == [name for name, _ in host_bench.SHAPES]
    assert all(r["steps"] > 0 and r["vocab"] == 1024 for r in rows)


def test_the_parts_sum_to_the_host_time(rows):
    for r in rows:
        parts = r["parts"]
        assert list(parts) == list(host_bench.PARTS)
        assert sum(parts.values()) == pytest.approx(r["host"], rel=1e-9, abs=1e-9)
        assert min(parts.values()) >= -1e-6, r  # no section counted twice


def test_each_shape_pays_where_it_should(rows):
    by = {r["shape"]: r["parts"] for r in rows}
    assert by["plain"]["tree"] == by["plain"]["verify"] == by["plain"]["auto"] == 0  # no tree, no auto
    assert by["plain"]["rows+p"] > 0 and by["plain"]["batch"] > 0 and by["plain"]["draws"] > 0
    for shape in ("chain d5", "resispec K4 d5 b12", "resispec K4 d6 b64"):
        assert all(by[shape][p] > 0 for p in _SPECULATIVE), (shape, by[shape])
        assert by[shape]["auto"] == 0
    assert by["auto"]["auto"] > 0


def test_the_wrappers_are_gone_afterwards(rows):
    from resispec_gguf.llama import backend
    from resispec_gguf.llama.backend import batches, kv
    from resispec_gguf.decoding import drafting, generation, tree

    masked = generation.Generation.__dict__["_masked"]  # a method since it adds the request's logit_bias
    assert masked.__qualname__ == "Generation._masked" and not hasattr(masked, "__wrapped__")
    # LlamaModel's decodes and commits are its mixins' (wrapped there while profiling)
    decode, commit = backend.LlamaModel.decode, backend.LlamaModel.commit
    assert decode is batches.Batches.__dict__["decode"] and decode.__qualname__ == "Batches.decode"
    assert commit is kv.KVCache.__dict__["commit"] and not hasattr(commit, "__wrapped__")
    assert drafting.growing is tree.growing and not hasattr(tree.growing, "__wrapped__")
    draw = drafting.DraftPhase.__dict__["_draw"]  # the draft phase's, which Generation inherits
    assert draw.__qualname__ == "DraftPhase._draw" and not hasattr(draw, "__wrapped__")
    assert generation.Generation._draw is draw


def test_cold_caches_wraps_the_decode_for_the_block_only():
    from resispec_gguf.llama import backend
    from resispec_gguf.llama.backend import batches

    before = batches.Batches.__dict__["_decode_batch"]  # LlamaModel's, from its mixin
    assert backend.LlamaModel._decode_batch is before
    with host_bench.cold_caches(1):
        assert backend.LlamaModel._decode_batch is not before
    assert batches.Batches.__dict__["_decode_batch"] is before and "_decode_batch" not in backend.LlamaModel.__dict__
    with host_bench.cold_caches(0):
        assert backend.LlamaModel._decode_batch is before


def test_growth_compares_each_shape_between_two_vocabularies():
    rows = [{"vocab": v, "shape": s, "unprofiled": ms} for v, s, ms in
            [(10, "plain", 1.0), (10, "auto", 2.0), (20, "plain", 1.5), (20, "auto", 2.0), (30, "plain", 9.0)]]
    assert host_bench.growth(rows, 10, 20) == pytest.approx({"plain": 0.5, "auto": 0.0})
    assert host_bench.growth(rows, 10, 30) == pytest.approx({"plain": 8.0})
