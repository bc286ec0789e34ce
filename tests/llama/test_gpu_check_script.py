"""scripts/gpu_check.py's CPU check (``--shapes tiny -ngl 0``): one run measures every part a
GPU session reads (host work at each vocabulary, the pair's overhead, backend sampling, the
projection) and its report holds every figure; its build step fails with one line where
it cannot build.  Never a time."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from script_loader import load_script
gpu_check = load_script("gpu_check")

VOCABS = (512, 1024)


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    work = tmp_path_factory.mktemp("gpu_check")
    out = work / "report.json"
    rc = gpu_check.main(["--shapes", "tiny", "-ngl", "0", "--threads", "1", "--rows", "1,2", "--context", "0",
                         "--skip", "kernels", "--host-vocab", ",".join(map(str, VOCABS)), "--host-tokens", "6",
                         "--host-reps", "1", "--probe-repeats", "1", "--workdir", str(work), "--json", str(out)])
    return rc, json.loads(out.read_text())


def test_the_cpu_check_runs(checked):
    rc, report = checked
    assert rc == 0
    assert report["ngl"] == 0 and report["shapes"] == "tiny" and report["skipped"] == ["kernels"]
    assert "failed" not in report


def test_host_work_is_there_for_every_shape_and_vocabulary(checked):
    _, report = checked
    shapes = list(gpu_check.HOST_GOALS)
    assert [(r["vocab"], r["shape"]) for r in report["host_thin"]] == [(v, s) for v in VOCABS for s in shapes]
    assert all(r["steps"] > 0 and r["unprofiled"] > 0 for r in report["host_thin"])
    assert list(report["host_growth"]) == shapes


def test_the_pair_is_measured_for_every_shape(checked):
    _, report = checked
    shapes = list(gpu_check.HOST_GOALS)
    assert [r["shape"] for r in report["pair"]] == shapes
    assert all(r["vocab"] == "pair" and r["bench_unprofiled"] > 0 for r in report["pair"])


def test_backend_sampling_counts_rows_with_and_without_a_new_plan(checked):
    _, report = checked
    if not report["backend_sampling_api"]:
        pytest.skip("llama-cpp-python without backend sampling")
    summary = report["backend_sampling_summary"]
    for key in ("wrong_rows", "wrong_rows_replanned"):
        bad, rows = summary[key]
        assert rows > 0 and 0 <= bad <= rows
    assert all(v is not None and v > 0 for v in summary["ms_per_row"].values())


def test_the_projection_covers_every_context(checked):
    _, report = checked
    assert list(report["projection"]) == ["0"]
    assert {p["setting"] for p in report["projection"]["0"]} >= {"chain d5", "resispec K4 d5 b16"}


def _one_line_error(capsys, argv) -> str:
    assert gpu_check.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err
    return err


def test_build_without_the_cuda_compiler_fails_with_one_line(tmp_path, monkeypatch, capsys):
    sdist = tmp_path / "llama_cpp_python.tar.gz"
    sdist.write_bytes(b"")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "nvcc"  # a wrapper left behind by a removed toolkit
    wrapper.write_text("#!/bin/sh\nexec /nonexistent/cuda/bin/nvcc \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("CUDACXX", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setattr(gpu_check, "CUDA_HOMES", ())
    err = _one_line_error(capsys, ["--build", str(sdist), "--workdir", str(tmp_path / "work")])
    assert "CUDA toolkit" in err and "nvcc" in err


def test_build_of_a_missing_archive_and_an_unknown_part_fail_with_one_line(tmp_path, capsys):
    assert "no source archive" in _one_line_error(capsys, ["--build", str(tmp_path / "none.tar.gz"),
                                                           "--workdir", str(tmp_path)])
    assert "unknown part" in _one_line_error(capsys, ["--skip", "curves,gpu"])


def test_pack_sdist_leaves_out_what_the_build_never_reads(tmp_path):
    top = tmp_path / "src" / "llama_cpp_python-0.3.36"
    kept = ["CMakeLists.txt", "llama_cpp/__init__.py", "vendor/llama.cpp/src/llama.cpp",
            "vendor/llama.cpp/tools/mtmd/CMakeLists.txt", "vendor/llama.cpp/modelsx.txt"]
    dropped = ["examples/a.py", "vendor/llama.cpp/models/ggml-vocab.gguf", "vendor/llama.cpp/docs/x.md",
               "vendor/llama.cpp/tests/t.cpp", "vendor/llama.cpp/benches/b.md"]
    for rel in kept + dropped:
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        (top / rel).write_text(rel)
    sdist = gpu_check.pack_source(top, tmp_path / "full.tar.gz")
    repacked = gpu_check.pack_source(sdist, tmp_path / "again.tar.gz")
    for archive in (sdist, repacked):
        with tarfile.open(archive) as tar:
            files = {m.name.split("/", 1)[1] for m in tar if m.isfile()}
            assert files == set(kept)
            assert tar.extractfile(f"{top.name}/CMakeLists.txt").read() == b"CMakeLists.txt"


def test_build_on_a_machine_without_a_gpu_fails_with_one_line(tmp_path, monkeypatch, capsys):
    sdist = tmp_path / "llama_cpp_python.tar.gz"
    sdist.write_bytes(b"")
    monkeypatch.setattr(gpu_check, "_nvcc", lambda: "/opt/cuda/bin/nvcc")
    monkeypatch.setattr(gpu_check, "NVIDIA_DEVICES", str(tmp_path / "nvidia[0-9]*"))
    monkeypatch.setenv("PATH", str(tmp_path))
    err = _one_line_error(capsys, ["--build", str(sdist), "--workdir", str(tmp_path / "work")])
    assert "no NVIDIA GPU" in err


def test_a_build_in_the_work_directory_is_reused_and_the_check_runs_with_it(tmp_path, capfd):
    import llama_cpp

    if not llama_cpp.llama_supports_gpu_offload():
        pytest.skip("this llama-cpp-python cannot offload: it cannot stand for a CUDA build")
    site = tmp_path / "llama_cpp_cuda"  # the installed package stands for a build made earlier
    site.mkdir()
    (site / "llama_cpp").symlink_to(Path(llama_cpp.__file__).parent)
    out = tmp_path / "report.json"
    argv = ["--build", str(tmp_path / "absent.tar.gz"), "--workdir", str(tmp_path), "--shapes", "tiny", "-ngl", "0",
            "--skip", ",".join(gpu_check.PARTS)]
    assert gpu_check.main(argv + ["--build-only"]) == 0
    assert not out.exists()
    assert gpu_check.main(argv + ["--json", str(out)]) == 0  # the check, run again with the build first on the path
    assert "reusing llama-cpp-python" in capfd.readouterr().err
    report = json.loads(out.read_text())
    assert report["gpu_offload_supported"] and report["skipped"] == sorted(gpu_check.PARTS)


def test_a_part_that_fails_leaves_the_others_and_the_report(tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("llama_decode failed with code -1")

    monkeypatch.setattr(gpu_check, "pair_work", broken)
    out = tmp_path / "report.json"
    assert gpu_check.main(["--shapes", "tiny", "-ngl", "0", "--threads", "1", "--skip", "kernels,host,sampling",
                           "--rows", "1,2", "--context", "0", "--workdir", str(tmp_path), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["failed"] == {"pair": "RuntimeError: llama_decode failed with code -1"}
    assert "curves_s" in report and "projection" in report
    assert "failed: pair: RuntimeError" in capsys.readouterr().out


def test_the_source_is_unpacked_once_at_a_fixed_place(tmp_path):
    top = tmp_path / "src" / "llama_cpp_python-0.3.36"
    (top / "vendor").mkdir(parents=True)
    (top / "CMakeLists.txt").write_text("project(x)")
    sdist = gpu_check.pack_source(top, tmp_path / "llama.tar.gz")
    work = tmp_path / "work"
    work.mkdir()
    first = gpu_check._source(sdist, work)
    assert first == work / "llama_cpp_src" / top.name and (first / "CMakeLists.txt").read_text() == "project(x)"
    (first / "CMakeLists.txt").write_text("kept")  # a second call reuses the folder (and CMake's cache with it)
    assert gpu_check._source(sdist, work) == first and (first / "CMakeLists.txt").read_text() == "kept"
    assert gpu_check._source(top, work) == top.resolve()


def _touch(*paths):
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"")


def test_cublas_comes_from_the_toolkit_or_else_from_nvidias_wheels(tmp_path, monkeypatch):
    toolkit, site = tmp_path / "cuda", tmp_path / "site"
    nvcc = toolkit / "bin" / "nvcc"
    _touch(nvcc)
    monkeypatch.setattr(gpu_check, "CUDA_HOMES", ())
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setattr(gpu_check.sys, "path", [str(site)])
    assert gpu_check.cublas_args(str(nvcc)) is None  # nowhere: --build stops before CMake
    wheel = site / "nvidia" / "cu13"
    _touch(wheel / "lib" / "libcublas.so.13", wheel / "lib" / "libcublasLt.so.13", wheel / "include" / "cublas_v2.h")
    args = gpu_check.cublas_args(str(nvcc)).split()
    assert f"-DCUDA_cublas_LIBRARY={wheel}/lib/libcublas.so.13" in args
    assert f"-DCUDA_cublasLt_LIBRARY={wheel}/lib/libcublasLt.so.13" in args
    assert f"-DCMAKE_CUDA_FLAGS=-I{wheel}/include" in args
    _touch(toolkit / "lib64" / "libcublas.so")
    assert gpu_check.cublas_args(str(nvcc)) == ""  # CMake finds the toolkit's own


def test_the_driver_library_is_linked_where_found_else_the_vmm_pool_is_off(tmp_path, monkeypatch):
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    _touch(nvcc)
    monkeypatch.setattr(gpu_check, "CUDA_HOMES", ())
    monkeypatch.setattr(gpu_check, "DRIVER_DIRS", ())
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path / "driver"))
    assert gpu_check.driver_args(str(nvcc)) == "-DGGML_CUDA_NO_VMM=ON"
    _touch(tmp_path / "driver" / "libcuda.so.580.1", tmp_path / "driver" / "libcuda.so.1")
    assert gpu_check.driver_args(str(nvcc)) == f"-DCUDA_cuda_driver_LIBRARY={tmp_path}/driver/libcuda.so.1"
