"""Tests for resispec_gguf.llama.loading: ``open_pair`` resolves what a ``ModelParams`` names and
opens the pair on the tiny GGUF models (downloads replaced by ``models.resolve_model`` fakes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from resispec_gguf.config import MAX_TREE_NODES, ModelParams
from resispec_gguf.errors import UserError
from resispec_gguf.llama import backend, loading, models
from resispec_gguf.llama.backend import native

SMALL = dict(n_ctx=256, n_threads=1, flash_attn=False)


@pytest.fixture
def opened():
    """Models opened by a test, closed after it."""
    found = []
    yield found
    for model in found:
        if model is not None:
            model.close()


@pytest.fixture
def resolved(monkeypatch, tiny_pair):
    """``models.resolve_model`` faked: the preset ``default`` is the tiny pair; ``calls`` lists
    ``(spec, role)``.  Paths resolve as before."""
    calls = []
    real = models.resolve_model

    def resolve(spec, role="target", progress=True):
        calls.append((spec, role))
        if spec == "default":
            return tiny_pair[0] if role == "target" else tiny_pair[1]
        return real(spec, role=role, progress=progress)

    monkeypatch.setattr(models, "resolve_model", resolve)
    return calls


def test_a_tiny_pair_opens(tiny_pair, opened):
    target, draft = loading.open_pair(ModelParams(target=str(tiny_pair[0]), draft=str(tiny_pair[1]), **SMALL),
                                      progress=False)
    opened += [target, draft]
    assert isinstance(target, backend.LlamaModel) and isinstance(draft, backend.LlamaModel)
    assert Path(target.path) == tiny_pair[0] and Path(draft.path) == tiny_pair[1]
    # a tree of MAX_TREE_NODES nodes, its root and the committed sequence
    assert target.n_seq_max == draft.n_seq_max == MAX_TREE_NODES + 2
    assert target.n_ctx == draft.n_ctx == 256 and target.n_threads == 1 and target.flash_attn is False
    assert target.vocab_info() == draft.vocab_info()


def test_a_preset_target_brings_its_draft(resolved, tiny_pair, opened):
    target, draft = loading.open_pair(ModelParams(target="default", **SMALL), progress=False)
    opened += [target, draft]
    assert resolved == [("default", "target"), ("default", "draft")]
    assert Path(target.path) == tiny_pair[0] and Path(draft.path) == tiny_pair[1]


def test_an_empty_draft_loads_none(resolved, tiny_pair, opened):
    target, draft = loading.open_pair(ModelParams(target="default", draft="", **SMALL), progress=False)
    opened += [target, draft]
    assert draft is None and resolved == [("default", "target")]
    target2, draft2 = loading.open_pair(ModelParams(target=str(tiny_pair[0]), **SMALL), progress=False)
    opened += [target2, draft2]
    assert draft2 is None  # a path target brings no draft


def test_a_missing_file_is_a_user_error(tmp_path, tiny_pair):
    missing = tmp_path / "nope.gguf"
    with pytest.raises(UserError, match="model file not found") as info:
        loading.open_pair(ModelParams(target=str(missing), draft="", **SMALL), progress=False)
    assert str(missing) in str(info.value)
    with pytest.raises(UserError, match="model file not found"):
        loading.open_pair(ModelParams(target=str(tiny_pair[0]), draft=str(missing), **SMALL), progress=False)


def test_a_file_that_is_not_a_model_is_a_user_error(not_gguf_file):
    with pytest.raises(UserError, match="not a GGUF file"):
        loading.open_pair(ModelParams(target=str(not_gguf_file), draft="", **SMALL), progress=False)


def test_an_incompatible_pair_is_refused_and_nothing_stays_open(tiny_pair, incompatible_draft, monkeypatch):
    closed = []
    real_close = backend.LlamaModel.close

    def close(self):
        if self._model is not None:
            closed.append(self.path)
        real_close(self)

    monkeypatch.setattr(backend.LlamaModel, "close", close)
    with pytest.raises(UserError, match=r"draft model is incompatible with the target: token 5 differs"):
        loading.open_pair(ModelParams(target=str(tiny_pair[0]), draft=str(incompatible_draft), **SMALL),
                          progress=False)
    assert sorted(closed) == sorted([str(tiny_pair[0]), str(incompatible_draft)])


def test_verbose_lets_llama_cpp_log(tiny_pair, opened):
    for verbose in (True, False):
        opened += loading.open_pair(ModelParams(target=str(tiny_pair[0]), draft="", verbose=verbose, **SMALL),
                                    progress=False)
        assert native._verbose is verbose  # the flag lives where the log callback reads it


@pytest.mark.parametrize("module", ["resispec_gguf", "resispec_gguf.llama.loading", "resispec_gguf.llama.models"])
def test_importing_the_package_does_not_load_llama_cpp(module):
    code = f"import sys, {module}; print('llama_cpp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
