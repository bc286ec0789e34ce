"""Tests for resispec_gguf.surfaces.doctor: every line's "problem" branch with the probes
replaced by fakes, each problem with the one command that fixes it, and the exit status."""

from __future__ import annotations

import io

import pytest

from resispec_gguf.errors import UserError
from resispec_gguf.llama.buildcheck import Verdict
from resispec_gguf.surfaces import doctor

INFO = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "
FACTS = {"llama_cpp_python": "0.3.36", "gpu_offload": False, "rpc": True, "system_info": INFO,
         "devices": [{"name": "CPU", "type": "CPU", "description": "Some CPU", "free_mib": 1000, "total_mib": 2000}],
         "rs_snapshots": True}
GOOD = Verdict("ok", facts=FACTS, seconds=0.8)
FLAGS = {"avx2", "avx512f", "fpu"}


@pytest.fixture
def healthy(monkeypatch, tmp_path):
    """Probes that find nothing wrong."""
    monkeypatch.setattr(doctor, "_probe_build", lambda: GOOD)
    monkeypatch.setattr(doctor, "_probe_cpu", lambda: ("Some CPU", FLAGS))
    monkeypatch.setattr(doctor, "_probe_nvidia", lambda: False)
    monkeypatch.setattr(doctor, "_probe_numba", lambda: ("0.60.0", str(tmp_path), True))
    monkeypatch.setattr(doctor, "_probe_models", lambda: [
        {"name": "default", "role": "target", "file": "t.gguf", "state": "ok", "path": "/c/t.gguf"},
        {"name": "default", "role": "draft", "file": "d.gguf", "state": "missing", "path": "/c/d.gguf"}])
    monkeypatch.setattr(doctor, "_probe_memory", lambda: 64 * 1024)
    monkeypatch.setattr(doctor, "_probe_commit", lambda: "abc1234")
    monkeypatch.setattr(doctor, "_probe_load", lambda: (0.5, 0.4, 0.3))
    monkeypatch.setattr(doctor, "_probe_costs", lambda: {"path": "/c/costs.json", "curves": 0, "busy": 0,
                                                        "corrected": 0, "newest": 0.0, "oldest": 0.0})
    monkeypatch.setattr(doctor, "_probe_optional", lambda: {"starlette": "0.37", "uvicorn": "0.29", "openai": "1.0",
                                                           "anthropic": None, "httpx": "0.27", "matplotlib": None})
    return monkeypatch


def _run(ctx=4096) -> tuple[int, str]:
    out = io.StringIO()
    return doctor.run(ctx, out=out), out.getvalue()


def test_all_well_is_exit_0_one_line_per_subject(healthy):
    code, text = _run()
    assert code == 0 and text.rstrip().endswith("all well") and "problem" not in text
    labels = [line.split("  ")[0] for line in text.splitlines()[1:-1]]
    assert labels == ["resispec-gguf", "llama-cpp-python", "recurrent", "CPU", "crash check", "devices", "numba", "models",
                      "memory", "load", "costs", "optional"]
    assert "resispec-gguf     0.1.0 (commit abc1234)" in text and "GPU offload no (a CPU build)" in text
    assert "0.50 0.40 0.30 on" in text and "/c/costs.json: empty" in text
    assert "clients: openai 1.0, anthropic not installed, httpx 0.27" in text
    assert "0.3.36; AVX2 AVX512" in text and "RPC yes" in text and "avx2 avx512f" in text
    assert "CPU (Some CPU, 1000 of 2000 MiB free)" in text and "not cached" in text


def _problem(text: str, label: str) -> tuple[str, str]:
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith(label))
    assert "problem: " in lines[i + 1] and "fix: " in lines[i + 2], text
    return lines[i + 1].split("problem: ")[1], lines[i + 2].split("fix: ")[1]


def test_a_crashing_build_with_amx(healthy):
    crash = Verdict("crashes", signal="SIGSEGV", facts={**FACTS, "system_info": INFO + "AMX_INT8 = 1 | "})
    healthy.setattr(doctor, "_probe_build", lambda: crash)
    healthy.setattr(doctor, "_probe_cpu", lambda: ("Xeon", FLAGS | {"amx_tile", "amx_int8"}))
    code, text = _run()
    problem, fix = _problem(text, "crash check")
    assert code == 1 and "AMX" in problem and "-mno-amx-tile" in fix and fix.startswith("CMAKE_ARGS=")
    assert fix.endswith("llama-cpp-python==0.3.36") and "1 problem found" in text


def test_an_undecided_check(healthy):
    healthy.setattr(doctor, "_probe_build", lambda: Verdict("fails", detail="OSError: disk", facts=FACTS))
    code, text = _run()
    problem, fix = _problem(text, "crash check")
    assert code == 1 and "fails: OSError: disk" in text and fix.startswith("pip install")


def test_llama_cpp_python_missing_or_another_version(healthy):
    healthy.setattr(doctor, "_probe_build", lambda: Verdict("fails", detail="No module named 'llama_cpp'"))
    code, text = _run()
    assert code == 1 and "not loadable" in text
    assert _problem(text, "llama-cpp-python")[1].endswith("llama-cpp-python==0.3.36")
    healthy.setattr(doctor, "_probe_build", lambda: Verdict("ok", facts={**FACTS, "llama_cpp_python": "0.3.2"}))
    code, text = _run()
    problem, fix = _problem(text, "llama-cpp-python")
    assert code == 1 and "0.3.36" in problem and "-DGGML_RPC=on" in fix


def test_a_build_using_instructions_the_cpu_lacks(healthy):
    healthy.setattr(doctor, "_probe_cpu", lambda: ("Old CPU", {"avx2"}))
    code, text = _run()
    problem, fix = _problem(text, "CPU")
    assert code == 1 and "AVX512" in problem and "force-reinstall" in fix


def test_a_gpu_the_build_cannot_use(healthy):
    healthy.setattr(doctor, "_probe_nvidia", lambda: True)
    code, text = _run()
    problem, fix = _problem(text, "devices")
    assert code == 1 and "CUDA" in problem and "-DGGML_CUDA=on" in fix


def test_numba_missing_or_its_cache_read_only(healthy):
    healthy.setattr(doctor, "_probe_numba", lambda: (None, "", False))
    code, text = _run()
    assert code == 1 and _problem(text, "numba")[1].startswith("pip install")
    healthy.setattr(doctor, "_probe_numba", lambda: ("0.60.0", "/usr/lib/numba-cache", False))
    code, text = _run()
    problem, fix = _problem(text, "numba")
    assert code == 1 and "compiles" in problem and fix.startswith("export NUMBA_CACHE_DIR=")


def test_a_cached_model_with_the_wrong_hash(healthy):
    healthy.setattr(doctor, "_probe_models", lambda: [
        {"name": "default", "role": "target", "file": "t.gguf", "state": "bad", "path": "/c/t.gguf"}])
    code, text = _run()
    problem, fix = _problem(text, "models")
    assert code == 1 and "/c/t.gguf" in problem
    assert fix == "rm /c/t.gguf && python -m resispec_gguf models fetch default"


def test_too_little_memory(healthy):
    healthy.setattr(doctor, "_probe_memory", lambda: 500)
    code, text = _run()
    problem, fix = _problem(text, "memory")
    assert code == 1 and "500 MiB available" in text and fix.startswith("python -m resispec_gguf chat --ctx ")
    assert doctor.need_mib(4096) > doctor.need_mib(1024) > 1500  # the weights alone are 1.5 GiB


def test_memory_unknown_is_not_a_problem(healthy):
    healthy.setattr(doctor, "_probe_memory", lambda: None)
    assert _run()[0] == 0


def test_a_context_out_of_bounds_is_a_user_error(healthy):
    with pytest.raises(UserError):
        doctor.run(10, out=io.StringIO())


def test_the_real_probes_return_plain_values():
    model, flags = doctor._probe_cpu()
    assert isinstance(model, str) and isinstance(flags, set)
    version, where, writable = doctor._probe_numba()
    assert version and where and isinstance(writable, bool)
    assert doctor._probe_memory() is None or doctor._probe_memory() > 0
    assert isinstance(doctor._probe_nvidia(), bool)


def test_the_model_probe_hash_checks_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("RESISPEC_CACHE", str(tmp_path))
    rows = doctor._probe_models()
    assert rows and all(r["state"] == "missing" for r in rows)
    (tmp_path / rows[0]["file"]).write_bytes(b"not the model")
    assert doctor._probe_models()[0]["state"] == "bad"


def test_the_pin_is_pyproject_s():
    import re
    from pathlib import Path

    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert re.search(r'"llama-cpp-python==([^"]+)"', pyproject).group(1) == doctor.PIN


def test_a_build_that_can_offload_without_a_gpu_says_so(healthy):
    healthy.setattr(doctor, "_probe_build", lambda: Verdict("ok", facts={**FACTS, "gpu_offload": True}, seconds=0.8))
    assert "GPU offload: the build can offload; no GPU found" in _run()[1]
    gpu = {"name": "CUDA0", "type": "GPU", "description": "H200", "free_mib": 1, "total_mib": 2}
    facts = {**FACTS, "gpu_offload": True, "devices": FACTS["devices"] + [gpu]}
    healthy.setattr(doctor, "_probe_build", lambda: Verdict("ok", facts=facts, seconds=0.8))
    assert "GPU offload yes, to CUDA0" in _run()[1]


def test_the_cost_cache_line_says_its_state_and_age():
    state = {"path": "/c/costs.json", "curves": 3, "busy": 1, "corrected": 2, "newest": 1000.0, "oldest": 100.0}
    line = doctor.costs_line(state, 1000.0 + 7200)
    assert line.text == ("/c/costs.json: 3 curves, newest 2 h old, oldest 2 h; 1 measured while the machine was "
                         "busy, 2 corrected from measured steps") and line.problem is None


def test_the_load_line_says_when_the_machine_is_busy():
    import os

    assert "busy" in doctor.load_line((9.0 * (os.cpu_count() or 1), 0.0, 0.0)).text
    assert "busy" not in doctor.load_line((0.0, 0.0, 0.0)).text
    assert doctor.load_line(None).text == "no load average on this platform"


def test_version_text_names_the_commit_when_there_is_one(monkeypatch):
    from resispec_gguf import __version__

    assert doctor.version_text("abc1234") == f"resispec-gguf {__version__} (commit abc1234)"
    monkeypatch.setattr(doctor, "_probe_commit", lambda: None)
    assert doctor.version_text() == f"resispec-gguf {__version__}"


def test_the_version_flag_prints_one_line_and_exits_0(capsys):
    from resispec_gguf.surfaces import cli

    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    out = capsys.readouterr().out
    assert stop.value.code == 0 and out.startswith("resispec-gguf ") and out.count("\n") == 1


@pytest.mark.parametrize("snapshots,words", [(True, "speculate in chains of up to 8"), (False, "decode plainly"),
                                             (None, "unknown")])
def test_the_recurrent_line_says_whether_hybrid_models_can_speculate(healthy, snapshots, words):
    facts = {k: v for k, v in FACTS.items() if k != "rs_snapshots" or snapshots is not None}
    if snapshots is not None:
        facts["rs_snapshots"] = snapshots
    healthy.setattr(doctor, "_probe_build", lambda: Verdict("ok", facts=facts, seconds=0.8))
    code, text = _run()
    line = next(line for line in text.splitlines() if line.startswith("recurrent"))
    assert code == 0 and words in line, line  # never a problem: plain decoding is exact


def test_the_recurrent_chain_is_the_backend_s():
    from resispec_gguf.llama.backend import recurrent

    assert doctor.RS_CHAIN == recurrent.RS_SNAPSHOTS


def test_a_preset_draft_of_another_vocabulary_names_its_route(healthy):
    healthy.setattr(doctor, "_probe_models", lambda: [
        {"name": "gemma-270m", "role": "target", "file": "t.gguf", "state": "ok", "path": "/c/t.gguf", "route": "text"},
        {"name": "gemma-270m", "role": "draft", "file": "g.gguf", "state": "ok", "path": "/c/g.gguf", "route": "text"}])
    code, text = _run()
    line = next(line for line in text.splitlines() if line.startswith("models"))
    assert code == 0 and line.count("text route") == 1
    assert "gemma-270m draft g.gguf: cached, sha256 ok (size and verified marker) (draft vocabulary differs: text route)" in line
