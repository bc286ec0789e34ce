"""Fill-in-the-middle: finding a vocabulary's FIM tokens and laying out infill prompts (pure,
with a character tokenizer), then through the engine on the tiny FIM vocabulary."""

import pytest

import tiny_gguf
from resispec_gguf.assist import fim
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.engine import Engine
from resispec_gguf.errors import UserError

QWEN = fim.FimTokens("qwen", prefix=-1, suffix=-2, middle=-3, repo=-4, file_sep=-5)
SANTA = fim.FimTokens("santacoder", prefix=-1, suffix=-2, middle=-3)


def chars(text: str) -> list[int]:
    return [ord(c) for c in text]


def text(ids) -> str:
    names = {-1: "[PRE]", -2: "[SUF]", -3: "[MID]", -4: "[REPO]", -5: "[SEP]"}
    return "".join(names.get(i, chr(i) if i >= 0 else "?") for i in ids)


@pytest.mark.parametrize("fam", fim.FAMILIES, ids=lambda f: f.name)
def test_every_family_is_found_by_any_spelling(fam):
    for k in range(max(len(fam.prefix), len(fam.suffix), len(fam.middle))):
        spelt = [(fam.prefix[min(k, len(fam.prefix) - 1)], 10), (fam.suffix[min(k, len(fam.suffix) - 1)], 11),
                 (fam.middle[min(k, len(fam.middle) - 1)], 12), ("<s>", 1)]
        found = fim.find_fim_tokens(spelt + [(s, 13) for s in fam.repo[:1]] + [(s, 14) for s in fam.file_sep[:1]])
        assert found == fim.FimTokens(fam.name, 10, 11, 12, 13 if fam.repo else None, 14 if fam.file_sep else None)


def test_no_fim_tokens_is_none():
    assert fim.find_fim_tokens([("<s>", 1), ("</s>", 2)]) is None
    assert fim.find_fim_tokens([("<|fim_prefix|>", 5), ("<|fim_suffix|>", 6)]) is None  # no middle


def test_plain_layout():
    ids, cut = fim.infill_prompt(QWEN, chars, "def f(", "):\n", middle="x", budget=100)
    assert text(ids) == "[PRE]def f(x[SUF]):\n[MID]" and not cut


def test_repo_level_layout_is_llama_cpps():
    extra = [("a.py", "A=1\n"), ("b.py", "B=2\n")]
    ids, cut = fim.infill_prompt(QWEN, chars, "p", "s", extra=extra, repo_level=True, budget=200)
    assert text(ids) == "[REPO]myproject\n[SEP]a.py\nA=1\n[SEP]b.py\nB=2\n[SEP]filename\n[PRE]p[SUF]s[MID]"
    assert not cut
    # a family without file headers separates snippets with text, and has no repo line
    ids, _ = fim.infill_prompt(SANTA, chars, "p", "s", extra=extra[:1], repo_level=True, budget=200)
    assert text(ids) == fim.SNIPPET_SEPARATOR + "A=1\n[PRE]p[SUF]s[MID]"


def test_cutting_to_fit():
    pre, suf = "0123456789" * 4, "abcdefghij" * 4
    # room 20 for prefix + suffix: the suffix gets a quarter, the prefix the rest
    ids, cut = fim.infill_prompt(QWEN, chars, pre, suf, budget=23)
    assert cut and text(ids) == "[PRE]" + pre[-15:] + "[SUF]" + suf[:5] + "[MID]"
    # a short prefix leaves the room to the suffix, and the reverse
    assert text(fim.infill_prompt(QWEN, chars, "p", suf, budget=23)[0]) == "[PRE]p[SUF]" + suf[:19] + "[MID]"
    assert text(fim.infill_prompt(QWEN, chars, pre, "s", budget=23)[0]) == "[PRE]" + pre[-19:] + "[SUF]s[MID]"
    # extras take what is left, losing their start
    extra = [("a", "1111"), ("b", "2222")]
    ids, cut = fim.infill_prompt(QWEN, chars, "p", "s", extra=extra, budget=3 + 2 + 8)
    assert cut and text(ids) == "1[SEP]b\n2222[PRE]p[SUF]s[MID]" and len(ids) == 13
    with pytest.raises(ValueError, match="tokens"):
        fim.infill_prompt(QWEN, chars, "p", "s", middle="m" * 10, budget=12)


# ---------------------------------------------------------------------------------- engine


@pytest.fixture(scope="module")
def fim_engine(fim_pair):
    with Engine.load(str(fim_pair[0]), str(fim_pair[1]), n_ctx=512, n_threads=1, progress=False) as e:
        yield e


def test_engine_finds_the_tiny_models_fim_tokens(fim_engine, engine):
    n = tiny_gguf.N_VOCAB
    assert fim_engine.fim_tokens == fim.FimTokens("qwen", n, n + 1, n + 2, n + 4, n + 5)
    assert engine.fim_tokens is None
    with pytest.raises(UserError, match="fill-in-the-middle"):
        engine.infill_tokens("a", "b")


def test_engine_infill_tokens(fim_engine):
    n = tiny_gguf.N_VOCAB
    ids, cut = fim_engine.infill_tokens("def f(", "):", middle="x")
    body = fim_engine.target.tokenize("def f(x", add_special=False, parse_special=False)
    assert ids == [tiny_gguf.BOS_ID, n] + body + [n + 1] + fim_engine.target.tokenize("):", add_special=False) + [n + 2]
    assert not cut
    # file text naming a FIM token stays text
    ids, _ = fim_engine.infill_tokens("<|fim_middle|>", "")
    assert ids.count(n + 2) == 1
    # cut to leave the answer room
    ids, cut = fim_engine.infill_tokens("x" * 2000, "y" * 2000, reserve=100)
    assert cut and len(ids) == 512 - 1 - 100
    res = fim_engine.generate(ids, SamplingParams(temperature=0, max_tokens=50), DraftParams())
    assert res.finish_reason in ("eos", "length")


# ---------------------------------------------------------------------------------- bench


def test_infill_workload_is_held_back_files_cut_deterministically():
    from resispec_gguf.bench import workloads
    from resispec_gguf.bench.workloads import infill

    items = workloads.WORKLOADS["infill"]
    assert len(items) == 2 * len(infill.files()) == 10
    assert infill.infill_items(infill.files()) == items  # same seed, same cuts
    assert infill.infill_items(infill.files(), seed=1) != items
    for i, item in enumerate(items):
        pre, suf = item["infill"]["input_prefix"], item["infill"]["input_suffix"]
        text = infill.files()[i // 2]
        assert text.startswith(pre) and text.endswith(suf) and len(pre) + len(suf) < len(text)
        assert len(text) // 5 <= len(pre) < 4 * len(text) // 5
        middle = text[len(pre): len(text) - len(suf)]
        assert 1 <= middle.count("\n") <= 5 and (middle.endswith("\n") or not suf)
    others = repr([workloads.WORKLOADS[w] for w in ("code", "edit", "chat")])
    assert not any(max(f.splitlines(), key=len) in others for f in infill.files())


def test_bench_runs_infill_prompts(fim_engine, tmp_path):
    from resispec_gguf.bench import measure as bench

    item = bench.WORKLOADS["infill"][0]
    pre, suf = item["infill"]["input_prefix"], item["infill"]["input_suffix"]
    assert bench.prompt_tokens(fim_engine, item) == fim_engine.infill_tokens(pre, suf, repo_level=True)[0]
    f = tmp_path / "p.jsonl"
    f.write_text('{"input_prefix": "a", "input_suffix": "b"}\n{"prompt": "c"}\n')
    parsed = bench.parse_prompts(str(f))
    assert parsed[0] == {"kind": "infill", "infill": {"input_prefix": "a", "input_suffix": "b"}}
    results = bench.run_bench(fim_engine, {"infill": bench.WORKLOADS["infill"][:2]}, ["none", "auto"], [0.8],
                              SamplingParams(max_tokens=8, seed=0), DraftParams(), progress=False)
    assert results[0]["workload"] == "infill" and results[0]["methods"]["auto"]["tokens"] > 0
