"""Shared pytest fixtures: tiny GGUF models written once per test session (see tiny_gguf.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/ is not a package

import tiny_gguf  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _private_cost_cache(tmp_path_factory):
    """Keep the auto mode's measured cost curves of throwaway test models out of the user's cache."""
    import os

    path = tmp_path_factory.mktemp("costs") / "costs.json"
    # a curve measured while the suite loads the machine is trusted all the same: one curve
    # per model for the session, so that auto's choices (and seeded outputs) repeat
    # and no engine corrects its curves from the steps it times (decoding.costcheck), which
    # would make them, and seeded outputs, depend on how loaded the machine was
    saved = {k: os.environ.get(k) for k in ("RESISPEC_COSTS", "RESISPEC_BUSY_LOAD", "RESISPEC_COST_CHECK")}
    os.environ["RESISPEC_COSTS"] = str(path)
    os.environ["RESISPEC_BUSY_LOAD"] = "inf"
    os.environ["RESISPEC_COST_CHECK"] = "0"
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session", autouse=True)
def _private_build_check_cache(tmp_path_factory):
    """Keep the start-up build check's verdict (llama/buildcheck.py) out of the user's cache;
    one verdict for the session, so the check's child process runs once."""
    import os

    old = os.environ.get("RESISPEC_BUILDCHECK")
    os.environ["RESISPEC_BUILDCHECK"] = str(tmp_path_factory.mktemp("buildcheck") / "buildcheck.json")
    yield
    if old is None:
        os.environ.pop("RESISPEC_BUILDCHECK", None)
    else:
        os.environ["RESISPEC_BUILDCHECK"] = old


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory) -> tuple[Path, Path]:
    """``(target_path, draft_path)``: tiny llama GGUFs sharing a vocabulary (acceptance ~0.7)."""
    return tiny_gguf.write_tiny_pair(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def engine(tiny_pair):
    """The tiny pair as an ``Engine``: one thread (on a busy machine llama.cpp's threads wait
    for each other), flash attention off (so a tree decode's logits equal a sequential
    decode's, which the KV-cache tests compare)."""
    from resispec_gguf.engine import Engine

    with Engine.load(str(tiny_pair[0]), str(tiny_pair[1]), n_ctx=512, n_threads=1, flash_attn=False,
                     progress=False, memory_size=0) as e:
        yield e  # no memory of past answers: many tests compare seeded replies made one after another


@pytest.fixture(scope="session")
def incompatible_draft(tmp_path_factory) -> Path:
    """A draft with the same vocab type/size/specials as ``tiny_pair`` but different token
    text and no byte tokens: it cannot spell the target's text, so no route serves."""
    return tiny_gguf.write_incompatible_draft(tmp_path_factory.mktemp("incompatible"))


@pytest.fixture(scope="session")
def cross_draft(tmp_path_factory) -> Path:
    """A draft of another vocabulary for ``tiny_pair``'s target (the text route)."""
    return tiny_gguf.write_cross_draft(tmp_path_factory.mktemp("cross"))


@pytest.fixture(scope="session")
def not_gguf_file(tmp_path_factory) -> Path:
    """A ``.gguf``-named file that is not GGUF."""
    return tiny_gguf.write_not_gguf(tmp_path_factory.mktemp("garbage"))


@pytest.fixture(scope="session")
def truncated_gguf(tmp_path_factory) -> Path:
    """The first half of a real tiny GGUF model."""
    return tiny_gguf.write_truncated_gguf(tmp_path_factory.mktemp("truncated"))


@pytest.fixture(scope="session")
def fim_pair(tmp_path_factory) -> tuple[Path, Path]:
    """``tiny_pair``'s models with fill-in-the-middle control tokens (Qwen2.5-Coder's
    spellings, ``tiny_gguf.FIM_TOKENS``) added to the vocabulary."""
    return tiny_gguf.write_tiny_pair(tmp_path_factory.mktemp("fim"), vocab_variant="fim")


@pytest.fixture(scope="session")
def noisy_pair(tmp_path_factory) -> tuple[Path, Path]:
    """A pair whose draft is much noisier (acceptance ~0.4): fallbacks are frequent, which
    gives the engine's exactness tests power against a wrong residual."""
    return tiny_gguf.write_tiny_pair(tmp_path_factory.mktemp("noisy"), seed=1, noise=0.6)


@pytest.fixture(scope="session")
def think_pair(tmp_path_factory) -> tuple[Path, Path]:
    """``tiny_pair``'s models with thinking markers (``tiny_gguf.THINK_TOKENS``) and a
    Qwen3-style template: the model opens its thinking, ``enable_thinking`` false closes it."""
    return tiny_gguf.write_tiny_pair(tmp_path_factory.mktemp("think"), vocab_variant="think",
                                     chat_template=tiny_gguf.THINK_TEMPLATE)


@pytest.fixture(scope="session")
def open_think_pair(tmp_path_factory) -> tuple[Path, Path]:
    """As ``think_pair``, with a DeepSeek-R1-distill-style template that opens the thinking
    block in the generation prompt."""
    return tiny_gguf.write_tiny_pair(tmp_path_factory.mktemp("open-think"), vocab_variant="think",
                                     chat_template=tiny_gguf.OPEN_THINK_TEMPLATE)
