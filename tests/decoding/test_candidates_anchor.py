"""candidates/anchor.py: the copy anchor (which fixed sequence the reply is following, and
where), its place at the head of the context source's candidates, and the law with it on."""

from __future__ import annotations

import pytest

from fake_models import TextCodec
from law_harness import LOOKUP_PROMPT, LOOKUP_SOURCE_CASES, RUNS, TARGET_TEXTS, lookup_source_law
from resispec_gguf.decoding.candidates.base import Request
from resispec_gguf.config import DraftParams
from resispec_gguf.decoding.candidates import anchor as anchor_mod
from resispec_gguf.decoding.candidates import views
from resispec_gguf.decoding.candidates.anchor import MIN_SYNC, CopyAnchor, Pieces
from resispec_gguf.decoding.candidates.context import ContextSource, anchor_bin, leading_bin

NL = 9  # a line break
# three "lines" of a file: 1 2 3 4 10 11 NL / 5 6 7 NL / 8 3 4 NL
FILE = [1, 2, 3, 4, 10, 11, NL, 5, 6, 7, NL, 8, 3, 4, NL]


def test_a_prompt_that_ends_inside_a_text_it_holds_is_followed_from_the_start():
    prompt = [7, 7] + FILE + [0, 1, 2, 3, 4]  # e.g. a completion prompt: the file, then its start again
    a = CopyAnchor([prompt], prompt)
    assert a.next_token() == (10, 0)  # not the prompt's own end, which continues with nothing
    assert CopyAnchor([prompt], [8, 8, 8]).next_token() is None


def test_the_anchor_is_found_after_enough_agreement_and_follows():
    a = CopyAnchor([FILE])
    a.commit([1, 2, 3])
    assert a.next_token() is None  # three tokens: fewer than a sync needs
    a.commit([4])
    assert MIN_SYNC == 4 and a.next_token() == (10, 0)
    a.commit([10, 11, NL])
    assert a.next_token() == (5, 3)
    # along a path it only follows: the anchor's tokens carry it on, any other leaves none
    assert a.next_token((5, 6)) == (7, 5)
    assert a.next_token((5, 8)) is None and a.next_token((5, 8, 6)) is None


def test_after_an_edited_line_it_goes_on_at_the_next_line_of_the_same_text():
    a = CopyAnchor([FILE])
    a.commit([1, 2, 3, 4, 10, 11, NL])
    a.commit([50])  # the second line rewritten: the copy breaks
    assert a.next_token() is None  # 50 is nowhere: the anchor waits at the break
    a.commit([51, NL])  # the line ends: the nearest line break after the break point
    assert a.next_token() == (8, 0)
    # the context's index alone, after one token of match (a line break), leads with 5
    src = ContextSource(FILE, None)
    src.commit([1, 2, 3, 4, 10, 11, NL, 50, 51, NL])
    got = src.propose()
    assert got[0][:2] == (8, anchor_bin(0)) and 5 in [c.token for c in got[1:]]


def test_a_word_inserted_into_a_line_resumes_where_the_copy_broke():
    a = CopyAnchor([FILE])
    a.commit([1, 2, 3, 4, 10, 11, NL, 5])
    a.commit([60])  # inserted before 6
    a.commit([6])  # back at the break point: the nearest 6 at or after it
    assert a.next_token() == (7, 0)


def test_a_false_resync_does_not_carry_the_break_point_away():
    text = [1, 2, 3, 4, 5, 6, 7, 3, 8, 9, 10]
    a = CopyAnchor([text])
    a.commit([1, 2, 3, 4])  # found; next 5
    a.commit([40])  # break at 5 (position 4)
    a.commit([3])  # a common token: the nearest 3 after the break is the one at 7
    assert a.next_token() == (8, 0)
    a.commit([5])  # not 8: breaks again, and searches from the first break point again
    assert a.next_token() == (6, 0)


def test_the_text_the_reply_copies_wins_over_the_one_the_counts_prefer():
    # the prompt holds "12 13" twice followed by 5 (a raw line break), a view once followed by
    # 77 (its escaped one); the reply copies the view, but spells its escape 40 as 41 (a
    # tokenization of its own), so the index matches no more than "12 13"
    prompt = [1, 21, 12, 13, 5, 2, 21, 12, 13, 5, 3]
    view = [19, 20, 21, 22, 40, 12, 13, 77, 30]
    src = ContextSource(prompt, None, sequences=[view])
    src.commit([19, 20, 21, 22, 41, 12, 13])
    got = src.propose()
    assert got[0][:2] == (77, anchor_bin(1))  # found again at 12 after the break, then followed 13
    assert got[1][:2] == (5, leading_bin(2, 0))  # the index's leader: "12 13" -> 5 twice, 77 once
    assert [c.token for c in src.propose((77,))][:1] == [30]


def test_another_sequence_needs_more_agreement_than_the_broken_one():
    a = CopyAnchor([[1, 2, 3, 4, 5, 6, 7, 8], [70, 71, 7, 8, 9]])
    a.commit([1, 2, 3, 4])
    a.commit([7])  # a break; 7 in the same text after the break point: one token agrees
    assert a.next_token() == (8, 0)
    b = CopyAnchor([[1, 2, 3, 4, 5, 6], [70, 71, 72, 73, 74]])
    b.commit([1, 2, 3, 4, 70, 71, 72])  # the other text agrees on three tokens only
    assert b.next_token() is None
    b.commit([73])
    assert b.next_token() == (74, 0)


def test_its_answers_depend_on_the_committed_tokens_not_on_how_they_came():
    one, two = CopyAnchor([FILE, FILE[::-1]]), CopyAnchor([FILE, FILE[::-1]])
    reply = [1, 2, 3, 4, 10, 11, NL, 50, NL, 8, 3]
    one.commit(reply)
    for t in reply:
        two.next_token((t,))  # paths asked on the way leave nothing behind
        two.commit([t])
    assert one.state == two.state and one.next_token() == two.next_token() == (4, 2)


def test_the_replay_script_counts_fewer_calls_with_the_anchor_where_two_texts_share_a_suffix():
    from script_loader import load_script

    replay = load_script("copy_replay").replay
    # the raw text's "12 13" goes on with 5 eight times, the view's with 77 four times; the
    # reply copies the view, spelling the escape before each "12 13" its own way (41, 42, ..)
    prompt = [1, 12, 13, 5] * 8
    view, reply = [18, 19, 20, 21], [18, 19, 20, 21]
    for k in range(4):
        view += [50 + k, 40, 12, 13, 77, 60 + k]
        reply += [50 + k, 41 + k, 12, 13, 77, 60 + k]
    plain, anchored = replay(prompt, [view], reply, 16, False), replay(prompt, [view], reply, 16, True)
    assert anchored[0] < plain[0] and anchored[1] < plain[1]


def test_the_replay_script_prices_its_chains_under_a_cost_curve():
    from script_loader import load_script

    script = load_script("copy_replay")
    curve = script.parse_curve("16:4,1:1,4:2")  # pairs in any order
    assert curve(1) == 1 and curve(16) == 4
    # a 16-token reply copied whole, the anchor following from its start: by run, a chain of
    # 4 candidates (5 rows: 2 + 2/12), then of 10 (11 rows: 2 + 14/12); knowing, 16 rows at once
    by_run, knowing = script.speedups([15 - i for i in range(16)], list(range(16)), curve, 16)
    assert by_run == pytest.approx(16 / (2 + 2 / 12 + 2 + 14 / 12)) and knowing == pytest.approx(4.0)
    # nothing agrees and no anchor: both decode one row a token
    assert script.speedups([0] * 5, [-1] * 5, curve, 16) == (1.0, 1.0)
    with pytest.raises(SystemExit, match="rows:cost"):
        script.parse_curve("16=4")
    with pytest.raises(SystemExit, match="one row"):
        script.parse_curve("4:2,16:4")


# a fixed sequence standing in for a tokenized view: it holds the prompt's last eight tokens
# (``LOOKUP_PROMPT[3:]``), so every request starts anchored there, and a reply that follows it
# stays anchored
VIEW = [0, 4, 3, 1, 3, 2, 1, 0, 4, 3, 1, 2, 4, 0, 3, 1, 2, 0]


@pytest.mark.parametrize("constrained", [False, True])
@pytest.mark.parametrize("temp", ["T1", "T0.6-filters"])
@pytest.mark.parametrize("case", list(LOOKUP_SOURCE_CASES))
def test_the_anchor_keeps_the_law_exact(case, temp, constrained, monkeypatch):
    """Through the engine on the Markov pair, a view beside the prompt: the anchor leads nodes
    (counted) and the first tokens' law is the target's."""
    monkeypatch.setattr(views, "prompt_views", lambda text, tokens: [VIEW])
    led = []
    original = anchor_mod.CopyAnchor.next_token

    def counted(self, path=()):
        got = original(self, path)
        led.append(got is not None)
        return got

    monkeypatch.setattr(anchor_mod.CopyAnchor, "next_token", counted)
    lookup_source_law(case, temp, constrained, "anchor")
    assert VIEW[3:11] == LOOKUP_PROMPT[3:]
    assert sum(led) > RUNS, (sum(led), len(led))  # the anchor led nodes: at least once a run


# a tokenizer whose texts can be cut two ways, as a JSON string's escapes are (``\\n`` one token,
# or ``\\`` then ``ndef``)
BS, N, BSN, NDEF, DEF, F, X, COLON, CONTROL, G, RET = range(11)
CODEC = TextCodec([b"\\", b"n", b"\\n", b"ndef", b"def", b" f", b"(x)", b":", b"", b" g", b"ret"])
# "def f(x):\\ndef g(x):\\ndef f(x):\\nret", cut as a tokenizer might cut it
TEXT = [DEF, F, X, COLON, BS, NDEF, G, X, COLON, BS, NDEF, F, X, COLON, BSN, RET]


def test_a_reply_that_cuts_the_text_otherwise_is_followed_by_its_bytes():
    a = CopyAnchor([TEXT], (), CODEC)
    a.commit([DEF, F, X, COLON])
    assert a.next_token() == (BS, 0)
    a.commit([BSN])  # the reply writes the escape whole: inside the text's "ndef" now
    assert a.next_token() == (DEF, 1)  # the rest ("def g(x)...") tokenized again: its first token
    assert a.next_token((DEF,)) == (G, 2) and a.next_token((N,)) is None
    a.commit([DEF, G, X, COLON])
    # where the text has the escape cut again, the reply's own way of writing it comes first
    assert a.next_token() == (BSN, 5)
    assert a.next_token((BSN,)) == (DEF, 6)
    a.commit([BS])  # and the text's way still follows, and the habit turns back
    assert a.next_token() == (NDEF, 6)
    a.commit([NDEF, F, X, COLON])
    assert a.next_token() == (BSN, 10)  # the text's own token here, with no habit of its own


def test_the_text_cut_whole_is_followed_where_the_reply_cuts_it_in_two():
    a = CopyAnchor([TEXT], (), CODEC)
    a.commit([NDEF, F, X, COLON])
    assert a.next_token() == (BSN, 0)
    a.commit([BS])
    assert a.next_token() == (N, 1)  # "n" then "ret": no "nret" in this vocabulary
    a.commit([N])
    assert a.next_token() == (RET, 2)
    a.commit([N])  # not the text's bytes: a break, and nothing agrees after it
    assert a.next_token() is None


def test_without_a_tokenizer_tokens_are_followed_as_they_are():
    pieces = Pieces(None)
    assert pieces(3) == b"\xff3;" and pieces(31) == b"\xff31;"  # no piece a prefix of another
    a = CopyAnchor([FILE])
    a.commit([1, 2, 3, 4])
    assert a.next_token() == (10, 0) and a.next_token((10,)) == (11, 1)
    # a control token has no text: a marker of its own, which no text token matches
    assert Pieces(CODEC)(CONTROL) == b"\xff8;"
    b = CopyAnchor([[DEF, F, CONTROL, X]], (), CODEC)
    b.commit([DEF, F])
    assert b.state is None  # two tokens: fewer than a sync needs


def test_the_context_source_hands_the_anchor_the_request_tokenizer():
    dp = DraftParams(method="auto")
    src = ContextSource.build(Request(TEXT[:4], dp, text=CODEC))
    assert src.anchor.pieces.codec is CODEC
    assert ContextSource.build(Request(TEXT[:4], dp)).anchor.pieces.codec is None


# the target's texts (``TARGET_TEXTS``: a, b, c, ab, ca) cut otherwise: the prompt's last eight
# tokens as they are (the anchor is found there), then text the Markov target writes in other cuts
SPLIT_VIEW = LOOKUP_PROMPT[3:] + [2, 0, 1, 4, 1, 0, 1, 2, 3, 4, 0, 2, 0, 1, 1, 4, 3, 0, 2, 1, 4, 0]


@pytest.mark.parametrize("constrained", [False, True])
@pytest.mark.parametrize("temp", ["T1", "T0.6-filters"])
@pytest.mark.parametrize("case", list(LOOKUP_SOURCE_CASES))
def test_the_anchor_following_bytes_keeps_the_law_exact(case, temp, constrained, monkeypatch):
    """As above, with the target's tokenizer: the reply's tokens cut the view otherwise, the
    anchor proposes from inside the view's tokens (counted) and the law is the target's."""
    from resispec_gguf.engine import Engine

    monkeypatch.setattr(views, "prompt_views", lambda text, tokens: [SPLIT_VIEW])
    monkeypatch.setattr(Engine, "_text_codec", lambda self: TextCodec(TARGET_TEXTS))
    inside = []
    original = anchor_mod.Pieces.first_token

    def counted(self, data):
        got = original(self, data)
        inside.append(got is not None)
        return got

    monkeypatch.setattr(anchor_mod.Pieces, "first_token", counted)
    lookup_source_law(case, temp, constrained, "anchor, bytes")
    assert sum(inside) > RUNS // 10, (sum(inside), len(inside))  # cached per request and place
