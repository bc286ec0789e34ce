"""memory.py: the engine's memory of past answers, a store spanning requests: its bounds and
file; the engine keeps answers there (``Memory.finish``), and a request may leave it out.  What
the context source proposes from it: test_candidates_context.py."""

import numpy as np
import pytest

from resispec_gguf.config import DraftParams, ModelParams, SamplingParams
from resispec_gguf.engine import Engine, open_memory
from resispec_gguf.decoding.candidates.context import ContextSource
from resispec_gguf.decoding.memory import Memory, vocab_key

from fake_models import MarkovModel, random_rows


def test_the_memory_is_bounded_oldest_answers_first():
    memory = Memory(max_tokens=12)
    for start in (100, 200, 300):
        memory.remember(list(range(start, start + 5)))
    assert memory.stats()["answers"] == 2
    assert ContextSource([0, 100, 101], memory).propose() == []
    assert [c.token for c in ContextSource([0, 300, 301], memory).propose()] == [302]


class _Vocab:
    def __init__(self, n, salt=b""):
        self.n_vocab = n
        self.salt = salt

    def token_piece(self, t):
        return bytes([t % 251]) + self.salt


def test_the_memory_file_round_trips_and_refuses_another_vocabulary(tmp_path):
    path = tmp_path / "memory.npz"
    key = vocab_key(_Vocab(300))
    assert key == vocab_key(_Vocab(300)) and key != vocab_key(_Vocab(300, b"x")) and key != vocab_key(_Vocab(301))
    memory, warning = Memory.open(str(path), key, max_tokens=1000)
    assert warning is None and memory.stats()["answers"] == 0  # no file yet: a new memory
    memory.remember([1, 2, 3, 4, 5])
    memory.save()
    again, warning = Memory.open(str(path), key, max_tokens=1000)
    assert warning is None
    assert [c.token for c in ContextSource([9, 2, 3], again).propose()] == [4]
    again.remember([6, 7, 8, 9])  # ids go on after the loaded ones
    assert again.stats()["answers"] == 2
    foreign, warning = Memory.open(str(path), vocab_key(_Vocab(300, b"x")), max_tokens=1000)
    assert foreign.stats()["answers"] == 0
    assert warning.startswith(f"memory file {path}") and "\n" not in warning and "vocabulary" in warning


@pytest.mark.parametrize("damage", [b"", b"not a memory", b"PK\x03\x04broken zip"])
def test_a_damaged_memory_file_is_one_warning_and_an_empty_memory(tmp_path, damage):
    path = tmp_path / "memory.npz"
    path.write_bytes(damage)
    memory, warning = Memory.open(str(path), "key")
    assert memory.stats()["answers"] == 0
    assert warning and "\n" not in warning and str(path) in warning
    memory.remember([1, 2, 3, 4])
    memory.save()  # overwritten with a good file
    assert Memory.open(str(path), "key")[0].stats()["answers"] == 1


def test_model_params_choose_the_memory():
    target = _Vocab(50)
    assert open_memory(ModelParams(memory_size=0), target) == (None, None)
    memory, warning = open_memory(ModelParams(memory_size=500), target)
    assert warning is None and memory.path is None and memory.index.max_tokens == 500


def _engine(**kw):
    rows = random_rows(6, 2, seed=3, scale=3.0)
    return Engine(MarkovModel(rows, 6, order=2, eog=(5,)), MarkovModel(rows, 6, order=2, eog=(5,)), cost_curves=None, **kw)


def test_the_engine_keeps_every_answer_unless_a_request_leaves_memory_out():
    engine = _engine()
    sp = SamplingParams(temperature=0.0, max_tokens=8, seed=1)
    res = engine.generate([1, 2, 3, 1], sp, DraftParams(method="none"))
    assert engine.memory.stats()["answers"] == (1 if len(res.tokens) >= 4 else 0)
    before = engine.memory.stats()["tokens"]
    engine.generate([1, 2, 3, 1], sp, DraftParams(method="auto", use_memory=False))
    assert engine.memory.stats()["tokens"] == before
    assert _engine(memory=None).memory is None


def test_greedy_output_with_memory_is_the_plain_output():
    """Memory candidates are verified like any others: at T 0 the output is the target's
    argmax path, whatever the memory holds."""
    engine = _engine()
    sp = SamplingParams(temperature=0.0, max_tokens=12, seed=0)
    plain = engine.generate([0, 2, 4, 1, 3], sp, DraftParams(method="none")).tokens
    for _ in range(3):  # the memory learns the answer, then proposes it
        for dp in (DraftParams(method="auto"), DraftParams(method="resispec", lookup=True, draws=2, depth=3)):
            assert engine.generate([0, 2, 4, 1, 3], sp, dp).tokens == plain


def test_a_request_starts_from_what_the_last_one_learnt_of_the_memory():
    from law_harness import COST_REGIMES, LOOKUP_PROMPT, _pair
    from resispec_gguf.config import DraftParams, SamplingParams
    from resispec_gguf.engine import Engine

    target, draft = _pair()
    memory = Memory(max_tokens=10_000)
    engine = Engine(target, draft, cost_curves=COST_REGIMES["gpu"], memory=memory)
    sp, dp = SamplingParams(temperature=1.0, max_tokens=12, seed=1), DraftParams(method="auto")
    assert memory.learnt() is None
    engine.generate(LOOKUP_PROMPT, sp, dp)
    learnt = memory.learnt()
    assert learnt is not None and learnt[1].sum() > 0
    gen = engine.generation(LOOKUP_PROMPT, sp, dp)
    cal = gen.auto.tuner.calibration
    assert np.allclose(cal.look_acc / cal.look_seen, learnt[0] / learnt[1])  # each bin's rate carried over
    off = engine.generation(LOOKUP_PROMPT, sp, dp.replace(use_memory=False)).auto.tuner.calibration
    assert not np.allclose(off.look_acc / off.look_seen, learnt[0] / learnt[1])  # without the memory: the priors
    memory.clear(learnt=False)  # the answers go, what auto learnt stays (bench's interleaved runs)
    assert memory.learnt() is learnt and len(memory.index) == 0
    memory.clear()
    assert memory.learnt() is None
