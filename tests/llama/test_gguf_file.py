"""Tests for resispec_gguf.llama.gguf_file: what a model file must look like before llama.cpp
is asked to load it."""

from __future__ import annotations

import struct

import pytest

from resispec_gguf.errors import UserError
from resispec_gguf.llama import gguf_file
from resispec_gguf.llama.gguf_file import check_gguf_file


def _header(version: int, length: int = 24) -> bytes:
    return (b"GGUF" + struct.pack("<I", version) + bytes(16))[:length]


def test_a_real_model_passes(tiny_pair):
    check_gguf_file(str(tiny_pair[0]))


@pytest.mark.parametrize("version", [2, 3])
def test_versions_llama_cpp_reads_pass(tmp_path, version):
    path = tmp_path / "m.gguf"
    path.write_bytes(_header(version) + b"rest")
    check_gguf_file(str(path))


def test_each_bad_file_is_one_message_naming_it(tmp_path, not_gguf_file):
    missing = tmp_path / "missing.gguf"
    cases = [
        (str(missing), f"model file not found: {missing}"),
        (str(tmp_path), f"model path is a directory, not a GGUF file: {tmp_path}"),
        (str(not_gguf_file), f"not a GGUF file (bad magic): {not_gguf_file}"),
    ]
    for name, content, message in [
        ("empty.gguf", b"", "not a GGUF file (bad magic)"),
        ("short.gguf", b"GG", "not a GGUF file (bad magic)"),
        ("cut.gguf", _header(3, 10), "truncated GGUF file"),
        ("v1.gguf", _header(1), "unsupported GGUF version 1"),
        ("v4.gguf", _header(4), "unsupported GGUF version 4"),
    ]:
        path = tmp_path / name
        path.write_bytes(content)
        cases.append((str(path), f"{message}: {path}"))
    for path, message in cases:
        with pytest.raises(UserError) as info:
            check_gguf_file(path)
        assert str(info.value) == message


def test_an_unreadable_file_says_why(tmp_path, monkeypatch):
    path = tmp_path / "locked.gguf"
    path.write_bytes(_header(3))

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(gguf_file, "open", refuse, raising=False)  # as for a file without read permission
    with pytest.raises(UserError) as info:
        check_gguf_file(str(path))
    assert str(info.value) == f"cannot read model file {path}: Permission denied"


def test_the_probe_model_is_a_gguf_llama_cpp_reads(tmp_path):
    import gguf

    path = tmp_path / "probe.gguf"
    gguf_file.write_probe_model(str(path))
    check_gguf_file(str(path))
    reader = gguf.GGUFReader(str(path))
    shapes = {t.name: tuple(int(n) for n in t.shape) for t in reader.tensors}
    assert shapes["token_embd.weight"] == (256, 320) and shapes["blk.0.ffn_down.weight"] == (512, 256)
    assert all(t.tensor_type == gguf.GGMLQuantizationType.F32 for t in reader.tensors)
    arch = reader.fields["general.architecture"]
    assert bytes(arch.parts[arch.data[0]]).decode() == "llama"
    assert len(reader.fields["tokenizer.ggml.tokens"].data) == 320
