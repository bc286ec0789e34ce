"""memory.py: the request's own context and the engine's memory of past answers as
deterministic candidates, several per node, with their calibration bins; the memory's bounds
and file; the engine keeps answers there, and a request may leave it out."""

import numpy as np
import pytest

from resispec_gguf.config import DraftParams, ModelParams, SamplingParams
from resispec_gguf.engine import Engine, open_memory
from resispec_gguf.decoding.calibration import FORCED_BIN, alternate_bin, is_memory_bin, lookup_bin, memory_bin
from resispec_gguf.decoding.memory import Memory, MemoryDrafts, vocab_key

from fake_models import MarkovModel, random_rows


def test_the_context_proposes_its_continuations_by_count_leader_first():
    # after "1 2": 3 twice, 4 once; the context ends in "... 1 2"
    drafts = MemoryDrafts([1, 2, 3, 9, 1, 2, 4, 8, 1, 2, 3, 7, 1, 2], None, k=3)
    got = drafts.propose()
    assert [t for t, _ in got] == [3, 4]
    assert got[0][1] == lookup_bin(2, 0)  # the leader: by match and copy run
    assert got[1][1] == alternate_bin(1 / 3)
    # a path below the committed tokens: "1 2 3" was followed by 9 and by 7
    assert sorted(t for t, _ in drafts.propose([3])) == [7, 9]
    assert [t for t, _ in drafts.propose([3, 9])] == [1]
    assert drafts.propose([3], run=2)[0][1] == lookup_bin(3, 2)


def test_a_context_seen_nowhere_before_proposes_nothing():
    assert MemoryDrafts([5, 6, 7], None).propose() == []
    drafts = MemoryDrafts([5, 6, 7, 5], None)
    assert drafts.propose() == [(6, lookup_bin(1, 0))]  # one token of context matched


def test_committed_tokens_extend_the_context():
    drafts = MemoryDrafts([1, 2, 3], None)
    assert drafts.propose() == []
    drafts.extend([1, 2])
    assert [t for t, _ in drafts.propose()] == [3]


def test_the_memory_adds_what_past_answers_continued_with():
    memory = Memory(max_tokens=1000)
    memory.remember([10, 11, 12, 13, 14])
    memory.remember([10, 11, 12, 15, 16])
    memory.remember([1, 2])  # too short to keep
    assert memory.stats()["answers"] == 2
    drafts = MemoryDrafts([7, 10, 11, 12], memory, k=3)
    got = drafts.propose()
    assert [t for t, _ in got] == [13, 15]  # ties: the smaller token first
    assert got[0][1] == memory_bin(3, 0.5)
    assert {b for _, b in got} <= set(range(8, 14))
    # the context's own candidates come first, the memory's only where they differ
    drafts = MemoryDrafts([10, 11, 12, 15, 0, 10, 11, 12], memory, k=3)
    assert [t for t, _ in drafts.propose()] == [15, 13]
    # an answer that joins the memory mid-request is read at the next proposal
    drafts = MemoryDrafts([3, 20, 21], memory)
    assert drafts.propose() == []
    memory.remember([20, 21, 22, 23])
    assert [t for t, _ in drafts.propose()] == [22]
    # a memory match needs two tokens
    assert MemoryDrafts([3, 12], memory).propose() == []


def test_bins_are_distinct_from_the_grammars_and_each_other():
    leading = {lookup_bin(m, r) for m in (1, 2, 9) for r in (0, 1, 2, 3, 4, 8, 20)}
    memory = {memory_bin(m, s) for m in (2, 6) for s in (0.1, 0.5, 0.9)}
    bins = leading | {alternate_bin(s) for s in (0.1, 0.5)} | memory
    assert FORCED_BIN not in bins and len(bins) == 15 and bins == set(range(16)) - {FORCED_BIN}
    assert {b for b in bins if is_memory_bin(b)} == memory


def test_the_memory_is_bounded_oldest_answers_first():
    memory = Memory(max_tokens=12)
    for start in (100, 200, 300):
        memory.remember(list(range(start, start + 5)))
    assert memory.stats()["answers"] == 2
    assert MemoryDrafts([0, 100, 101], memory).propose() == []
    assert [t for t, _ in MemoryDrafts([0, 300, 301], memory).propose()] == [302]


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
    assert [t for t, _ in MemoryDrafts([9, 2, 3], again).propose()] == [4]
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
