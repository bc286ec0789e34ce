"""candidates/context.py: the request's own context and the engine's memory of past answers as
deterministic candidates, several per node, with their bins (the context source's own range of
the calibration's layout)."""

from resispec_gguf.decoding.calibration import FORCED_BIN, is_memory_bin, lookup_bin
from resispec_gguf.decoding.candidates import Candidate, layout
from resispec_gguf.decoding.candidates.context import ContextSource, alternate_bin, anchor_bin, leading_bin, memory_bin
from resispec_gguf.decoding.memory import Memory


def test_the_context_proposes_its_continuations_by_count_leader_first():
    # after "1 2": 3 twice, 4 once; the context ends in "... 1 2"
    drafts = ContextSource([1, 2, 3, 9, 1, 2, 4, 8, 1, 2, 3, 7, 1, 2], None, k=3)
    got = drafts.propose()
    assert [c.token for c in got] == [3, 4]
    assert got[0][1] == leading_bin(2, 0)  # the leader: by match and copy run
    assert got[1][1] == alternate_bin(1 / 3)
    # a path below the committed tokens: "1 2 3" was followed by 9 and by 7
    assert sorted(c.token for c in drafts.propose([3])) == [7, 9]
    assert [c.token for c in drafts.propose([3, 9])] == [1]
    assert drafts.propose([3], run=2)[0][1] == leading_bin(3, 2)


def test_a_context_seen_nowhere_before_proposes_nothing():
    assert ContextSource([5, 6, 7], None).propose() == []
    drafts = ContextSource([5, 6, 7, 5], None)
    assert drafts.propose() == [Candidate(6, leading_bin(1, 0))]  # one token of context matched


def test_committed_tokens_extend_the_context():
    drafts = ContextSource([1, 2, 3], None)
    assert drafts.propose() == []
    drafts.commit([1, 2])
    assert [c.token for c in drafts.propose()] == [3]


def test_the_memory_adds_what_past_answers_continued_with():
    memory = Memory(max_tokens=1000)
    memory.remember([10, 11, 12, 13, 14])
    memory.remember([10, 11, 12, 15, 16])
    memory.remember([1, 2])  # too short to keep
    assert memory.stats()["answers"] == 2
    drafts = ContextSource([7, 10, 11, 12], memory, k=3)
    got = drafts.propose()
    assert [c.token for c in got] == [13, 15]  # ties: the smaller token first
    assert got[0][1] == memory_bin(3, 0.5)
    assert {c.bin for c in got} <= set(range(7, 13))
    # the context's own candidates come first, the memory's only where they differ
    drafts = ContextSource([10, 11, 12, 15, 0, 10, 11, 12], memory, k=3)
    assert [c.token for c in drafts.propose()] == [15, 13]
    # an answer that joins the memory mid-request is read at the next proposal
    drafts = ContextSource([3, 20, 21], memory)
    assert drafts.propose() == []
    memory.remember([20, 21, 22, 23])
    assert [c.token for c in drafts.propose()] == [22]
    # a memory match needs two tokens
    assert ContextSource([3, 12], memory).propose() == []


def test_its_bins_fill_its_range_and_are_apart_from_the_grammars():
    leading = {leading_bin(m, r) for m in (1, 2, 9) for r in (0, 1, 2, 3, 4, 8, 20)}
    memory = {memory_bin(m, s) for m in (2, 6) for s in (0.1, 0.5, 0.9)}
    anchored = {anchor_bin(r) for r in (0, 1, 2, 7, 8, 15, 16, 40)}
    bins = leading | {alternate_bin(s) for s in (0.1, 0.5)} | memory | anchored
    assert anchored == set(range(15, 20))
    assert bins == set(range(len(ContextSource.priors))) == set(range(20))
    assert ContextSource.apart == memory
    lay = layout()  # the global bins: the context's first, the grammar's elsewhere
    assert [lay.bin("context", b) for b in sorted(bins)] == list(range(20)) and FORCED_BIN not in range(20)
    assert {lay.bin("context", b) for b in bins if is_memory_bin(lay.bin("context", b))} == memory
    assert [lookup_bin(m, r) for m, r in ((1, 0), (2, 2), (2, 9), (5, 30))] == [4, 2, 13, 14]
