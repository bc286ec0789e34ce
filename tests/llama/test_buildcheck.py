"""Tests for resispec_gguf.llama.buildcheck: the start-up check of the llama.cpp build runs in a
child process, a crashing child is the verdict ``crashes`` (a fault injected through the test
hook), verdicts are cached per build and machine, and the crash line names the cause and the
command that fixes it."""

from __future__ import annotations

import json
import os
import signal

import pytest

from resispec_gguf.errors import UserError
from resispec_gguf.llama import buildcheck
from resispec_gguf.llama.buildcheck import Verdict


@pytest.fixture
def cache(monkeypatch, tmp_path):
    """A private cache directory, the check not skipped."""
    monkeypatch.setenv("RESISPEC_CACHE", str(tmp_path))
    monkeypatch.delenv(buildcheck.CACHE_ENV, raising=False)  # so the model cache's file
    monkeypatch.delenv(buildcheck.SKIP_ENV, raising=False)
    monkeypatch.delenv(buildcheck.FAULT_ENV, raising=False)
    return tmp_path


def test_this_build_loads_and_decodes_a_quantized_model(cache):
    verdict = buildcheck.run_child()
    assert verdict.status == "ok", verdict
    assert verdict.facts["llama_cpp_python"] and "CPU" in verdict.facts["system_info"]
    assert any(d["type"] == "CPU" for d in verdict.facts["devices"])


def test_a_crashing_child_is_the_verdict_crashes(cache):
    verdict = buildcheck.run_child(env={**os.environ, buildcheck.FAULT_ENV: "segv"})
    assert verdict.status == "crashes" and verdict.signal == "SIGSEGV", verdict
    assert verdict.facts["llama_cpp_python"]  # printed before the probe, so known even after a crash


def test_the_verdict_is_cached_per_build_and_reused(cache):
    runs = []

    def run():
        runs.append(1)
        return Verdict("ok", facts={"llama_cpp_python": "x"}, seconds=0.5)

    first = buildcheck.check(run=run)
    second = buildcheck.check(run=run)
    assert len(runs) == 1 and not first.cached and second.cached and second.status == "ok"
    assert second.facts == {"llama_cpp_python": "x"}
    assert (cache / "buildcheck.json").is_file()
    buildcheck.check(run=run, use_cache=False)
    assert len(runs) == 2


def test_a_changed_library_is_checked_again(cache, monkeypatch):
    runs = []
    buildcheck.check(run=lambda: runs.append(1) or Verdict("ok"))
    monkeypatch.setattr(buildcheck, "library_files", lambda: [["/lib/libllama.so", 1, 2]])
    buildcheck.check(run=lambda: runs.append(1) or Verdict("ok"))
    assert len(runs) == 2


def test_undecided_verdicts_are_not_cached(cache):
    runs = []
    for _ in range(2):
        buildcheck.check(run=lambda: runs.append(1) or Verdict("fails", detail="no space"))
    assert len(runs) == 2


def test_a_corrupt_cache_is_ignored(cache):
    (cache / "buildcheck.json").write_text("{not json")
    assert buildcheck.check(run=lambda: Verdict("ok")).status == "ok"
    assert json.loads((cache / "buildcheck.json").read_text())


def test_the_library_files_identify_the_build():
    files = buildcheck.library_files()
    assert files and all(os.path.isfile(p) and size > 0 for p, size, _ in files)
    assert any("llama" in os.path.basename(p) for p, _, _ in files)


def test_a_library_path_override_is_part_of_the_build(monkeypatch, tmp_path):
    (tmp_path / "libllama.so").write_bytes(b"x")
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(tmp_path))
    assert buildcheck.library_files()[0][:2] == [str((tmp_path / "libllama.so").resolve()), 1]


def test_cpu_info_reads_model_and_flags():
    text = "processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: fpu avx2 amx_tile\n\nprocessor\t: 1\n"
    assert buildcheck.cpu_info(text) == ("Intel Xeon", {"fpu", "avx2", "amx_tile"})
    assert buildcheck.cpu_info("") == ("", set())


def test_the_crash_line_names_amx_when_cpu_and_build_have_it():
    v = Verdict("crashes", signal="SIGSEGV",
                facts={"llama_cpp_python": "0.3.36", "system_info": "CPU : AMX_INT8 = 1 |"})
    line = buildcheck.crash_message(v, {"amx_tile"})
    assert "\n" not in line and "SIGSEGV" in line and "AMX" in line
    assert buildcheck.AMX_REBUILD in line and "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" in line
    assert line.endswith("(RESISPEC_SKIP_BUILD_CHECK=1 skips this check)")
    assert buildcheck.crash_cause(v, {"amx_tile"})[1] == buildcheck.AMX_REBUILD


def test_the_crash_line_without_amx_names_the_signal_and_a_rebuild():
    v = Verdict("crashes", signal="SIGILL", facts={"llama_cpp_python": "0.3.36", "system_info": "CPU : AVX2 = 1 |",
                                                 "rpc": True})
    for flags in (set(), {"amx_tile"}):  # AMX advertised but not in the build: not the cause
        line = buildcheck.crash_message(v, flags)
        assert "SIGILL" in line and "-mno-amx" not in line and "-DGGML_RPC=on" in line
        assert "pip install --no-cache-dir --force-reinstall llama-cpp-python==0.3.36" in line


def test_require_working_build_raises_one_line_on_a_crash(cache, monkeypatch):
    monkeypatch.setattr(buildcheck, "check", lambda note=None: Verdict("crashes", signal="SIGSEGV"))
    with pytest.raises(UserError, match="crashes \\(SIGSEGV\\)"):
        buildcheck.require_working_build()
    monkeypatch.setenv(buildcheck.SKIP_ENV, "1")
    assert buildcheck.require_working_build() is None


def test_require_working_build_notes_an_undecided_check(cache, monkeypatch):
    monkeypatch.setattr(buildcheck, "check", lambda note=None: Verdict("timeout", detail="no answer in 120 s"))
    notes = []
    assert buildcheck.require_working_build(note=notes.append).status == "timeout"
    assert len(notes) == 1 and "timeout" in notes[0]


def test_a_child_that_fails_is_fails_with_its_last_line():
    import subprocess

    proc = subprocess.CompletedProcess([], 1, stdout='{"facts": {"rpc": false}}\n', stderr="Traceback\nOSError: disk\n")
    v = buildcheck._verdict_of(proc, 0.1)
    assert v.status == "fails" and v.detail == "OSError: disk" and v.facts == {"rpc": False}
    proc = subprocess.CompletedProcess([], -signal.SIGILL, stdout="", stderr="")
    assert buildcheck._verdict_of(proc, 0.1).signal == "SIGILL"
    proc = subprocess.CompletedProcess([], 0xC000001D, stdout="", stderr="")  # Windows: illegal instruction
    v = buildcheck._verdict_of(proc, 0.1)
    assert v.status == "crashes" and v.signal == "exception 0xC000001D"


def test_the_verdict_file_can_be_named(cache, monkeypatch, tmp_path):
    monkeypatch.setenv(buildcheck.CACHE_ENV, str(tmp_path / "elsewhere.json"))
    buildcheck.check(run=lambda: Verdict("ok"))
    assert (tmp_path / "elsewhere.json").is_file() and not (cache / "buildcheck.json").exists()


def test_the_check_says_before_it_runs_and_not_when_cached(cache):
    lines = []
    buildcheck.check(run=lambda: Verdict("ok"), note=lines.append)
    buildcheck.check(run=lambda: Verdict("ok"), note=lines.append)
    assert lines == [buildcheck.RUNNING]
