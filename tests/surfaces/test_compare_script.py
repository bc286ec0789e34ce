"""The pure parsers of scripts/compare_llama_cpp.py, on output captured from llama.cpp's
llama-speculative-simple and llama-bench (build 0c1e570, the version vendored by
llama-cpp-python 0.3.36).  No binaries or models needed."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "scripts" / "compare_llama_cpp.py"
_spec = importlib.util.spec_from_file_location("compare_llama_cpp", _PATH)
cmp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cmp)

# stderr of llama-speculative-simple, trimmed (timestamps and level as it prints them)
SPEC_SIMPLE_LOG = """\
0.00.865.156 W load: control-looking token: 128247 '</s>' was not control-type; this is probably a bug in the model. its type will be overridden
0.04.721.012 I common_speculative_init_result: loading draft model '/root/.cache/resispec-gguf/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf'
0.19.519.408 I encoded   17 tokens in    5.190 seconds, speed:    3.275 t/s
0.19.519.443 I decoded   14 tokens in    3.917 seconds, speed:    3.574 t/s
0.19.519.444 I 
0.19.519.444 I n_draft   = 5
0.19.519.444 I n_predict = 14
0.19.519.444 I n_drafted = 20
0.19.519.444 I n_accept  = 10
0.19.519.446 I accept    = 50.000%
0.19.519.446 I 
0.19.519.447 I draft:

0.19.519.505 I common_perf_print:    sampling time =       7.26 ms
0.19.519.514 I common_perf_print: prompt eval time =   10202.95 ms /    42 tokens (  242.93 ms per token,     4.12 tokens per second)
0.19.519.518 I common_perf_print: unaccounted time =    4588.36 ms /  31.0 %      (total - sampling - prompt eval - eval) / (total)
"""

# stdout of `llama-bench -m ... -p 0 -n 8 -r 2 -t 2 -o json`, trimmed to the keys that matter
LLAMA_BENCH_JSON = """\
[
  {
    "build_commit": "0c1e570",
    "build_number": 1,
    "cpu_info": "AMD EPYC",
    "backends": "CPU",
    "model_type": "qwen2 1.5B Q4_K - Medium",
    "n_threads": 2,
    "n_prompt": 0,
    "n_gen": 8,
    "n_depth": 0,
    "avg_ns": 2609982499,
    "stddev_ns": 2047227627,
    "avg_ts": 4.427040,
    "stddev_ts": 3.472498,
    "samples_ns": [ 4057591037, 1162373961 ],
    "samples_ts": [ 1.97161, 6.88247 ]
  }
]
"""


def test_parse_spec_simple_output():
    r = cmp.parse_spec_simple_output(SPEC_SIMPLE_LOG)
    assert r["decoded_tokens"] == 14
    assert r["decode_s"] == pytest.approx(3.917)
    assert r["tokens_per_s"] == pytest.approx(3.574)
    assert (r["encoded_tokens"], r["encode_tokens_per_s"]) == (17, pytest.approx(3.275))
    assert (r["n_draft"], r["n_predict"], r["n_drafted"], r["n_accept"]) == (5, 14, 20, 10)
    assert r["accept"] == pytest.approx(0.5)


def test_parse_spec_simple_output_without_prefixes_and_nothing_drafted():
    text = "decoded    3 tokens in    0.500 seconds, speed:    6.000 t/s\nn_drafted = 0\nn_accept  = 0\naccept    = -nan%\n"
    r = cmp.parse_spec_simple_output(text)
    assert r["tokens_per_s"] == 6.0 and r["decoded_tokens"] == 3
    assert r["accept"] is None


def test_parse_spec_simple_output_missing_line():
    with pytest.raises(ValueError, match="decoded"):
        cmp.parse_spec_simple_output("error: failed to load model\n")


def test_parse_llama_bench_json():
    assert cmp.parse_llama_bench_json(LLAMA_BENCH_JSON) == pytest.approx(4.42704)


def test_parse_llama_bench_json_picks_tg_test_and_skips_noise():
    text = 'noise\n[{"n_prompt": 512, "n_gen": 0, "avg_ts": 90.0}, {"n_prompt": 0, "n_gen": 64, "avg_ts": 7.5}]'
    assert cmp.parse_llama_bench_json(text) == 7.5


@pytest.mark.parametrize("text", ["", "not json", "[{\"n_prompt\": 512, \"n_gen\": 0, \"avg_ts\": 90.0}]", "[1, 2"])
def test_parse_llama_bench_json_errors(text):
    with pytest.raises(ValueError):
        cmp.parse_llama_bench_json(text)


def test_parse_version_and_help_flags():
    assert cmp.parse_version("version: 0.5.0-dev (build 1, commit 0c1e570)\nbuilt with GNU") == "0.5.0-dev (build 1, commit 0c1e570)"
    help_text = "--spec-draft-n-max N      number of tokens\n--draft, --draft-n, --draft-max N   removed\n"
    assert cmp.help_has(help_text, "--spec-draft-n-max")
    assert cmp.help_has(help_text, "--draft-max")
    assert not cmp.help_has(help_text, "--spec-type")


def test_summary_and_table():
    runs = [{"tokens_per_s": 10.0, "tokens": 64, "accepted": 30, "drafted": 40},
            {"tokens_per_s": 20.0, "tokens": 64, "accepted": 10, "drafted": 40}]
    s = cmp.summarise(runs, none_tps=[5.0, 10.0], bench_tps=[10.0, 0.0])
    assert s["tokens_per_s"] == 15.0 and s["vs_none"] == 2.0 and s["vs_llama_bench"] == 1.0
    assert s["acceptance"] == 0.5 and s["tokens"] == 128
    table = cmp.format_table([{"temperature": 1.0, "rows": {"ours none": s}}])
    assert "ours none" in table and "15.00" in table and not math.isnan(s["vs_none"])


def test_missing_binaries_exit_2(tmp_path, capsys):
    assert cmp.main(["--llama-cpp-bin", str(tmp_path / "nope")]) == 2
    assert cmp.main(["--llama-cpp-bin", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "not a directory" in err[0] and "llama-speculative-simple" in err[1]
