"""decoding/textdraft.py: the draft of another vocabulary follows the committed text.

The boundary: a target token may end inside a draft token, so only a window at the end of the
draft's tokens is re-tokenized (never the prompt again); an unfinished UTF-8 character waits;
the greedy chain continues the committed text exactly, or offers nothing; another request's
use of the model empties its cache first."""

from __future__ import annotations

from fake_models import TextMarkov, longest_match, random_rows
from resispec_gguf.decoding.textdraft import TextDraft, complete_utf8, resync

TEXTS = (b"h", b"e", b"l", b"o", b" ", b"hel", b"hello", b"lo", b"\xc3", b"\xa9", b"\xc3\xa9", b"")


def _piece(t):
    return TEXTS[t]


def _tok(data):
    return longest_match(TEXTS, data)


def _draft(p_min=0.0):
    """A draft over ``TEXTS`` that never ends (its end token's logit is far below the rest)."""
    n = len(TEXTS)
    rows = {}
    for ctx, row in random_rows(n, 2, 5).items():
        row = row.copy()
        row[n - 1] = -30.0
        rows[ctx] = row
    return TextDraft(TextMarkov(rows, TEXTS, order=2, eog=(n - 1,), n_ctx=64, n_seq_max=10), bos=None, p_min=p_min)


def test_complete_utf8_leaves_out_an_unfinished_character():
    assert complete_utf8(b"abc") == 3
    assert complete_utf8("é".encode()) == 2
    assert complete_utf8(b"a\xc3") == 1
    assert complete_utf8("a€".encode()[:-1]) == 1  # two of the euro sign's three bytes
    assert complete_utf8("a😀".encode()[:-2]) == 1
    assert complete_utf8(b"") == 0


def test_resync_keeps_what_lies_inside_and_re_tokenizes_the_window():
    tokens, ends, exact = resync([], [], b"hel", _tok, _piece, 0)
    assert tokens == [5] and ends == [3] and exact  # "hel"
    # the target went on with "lo": "hel" + "lo" is one draft token, "hello"
    tokens, ends, exact = resync(tokens, ends, b"hello", _tok, _piece, 0)
    assert tokens == [6] and ends == [5] and exact
    # a longer text: the tokens before the window are kept, the window alone is re-read
    tokens, ends, _ = resync([0, 1, 2, 2, 3], [1, 2, 3, 4, 5], b"hello hel", _tok, _piece, 0)
    assert tokens == [0, 1, 2, 2, 3, 4, 5] and ends[-1] == 9
    # a text that departs from what the tokens spell drops the tokens after the departure
    tokens, ends, _ = resync([6, 4, 5], [5, 6, 9], b"hello ho", _tok, _piece, 0)
    assert tokens == [6, 4, 0, 3] and ends == [5, 6, 7, 8]
    # a BOS (fixed) is never re-tokenized
    tokens, _, _ = resync([99], [0], b"he", _tok, lambda t: b"" if t == 99 else _piece(t), 1)
    assert tokens == [99, 0, 1]


def test_following_reads_the_boundary_not_the_prompt():
    draft = _draft()
    prompt = b"hello " * 20
    f = draft.follower(prompt)
    assert f.spelt == prompt and f.exact
    read = draft.model.tokenized
    assert read == len(prompt)
    f.follow(prompt + b"hel")
    f.follow(prompt + b"hello")
    assert f.spelt == prompt + b"hello"
    assert draft.model.tokenized - read < 3 * 12  # windows only, never the prompt again
    f.follow(prompt + b"hello\xc3")  # an unfinished character waits for its next byte
    assert f.spelt == prompt + b"hello"
    f.follow(prompt + "helloé".encode())
    assert f.spelt == prompt + "helloé".encode()


def test_the_chain_continues_the_committed_text():
    draft = _draft()
    f = draft.follower(b"hel")
    before = list(f.tokens)
    text, spans = f.chain(5)
    assert 0 < len(spans) <= 5 and spans[-1][0] == len(text)
    # the draft model's own greedy continuation, decoded on a fresh cache, is the same text
    model = draft.model
    model.reset()
    ctx, out = before, b""
    for _ in range(len(spans)):
        row = model.row(ctx)
        t = int(row.argmax())
        ctx.append(t)
        out += TEXTS[t]
    assert text == out and len(spans) == 5
    # committed text ending inside a draft token: the chain is what comes after it
    f2 = draft.follower(b"hel")
    f2.follow(b"hel")
    assert f2.chain(5) == (text, spans)
    assert model.n_past >= 0 and model._nodes == []  # the chain's nodes are dropped


def test_another_request_empties_the_cache_first():
    draft = _draft()
    a, b = draft.follower(b"hello hello"), draft.follower(b"oh hel")
    first = a.chain(4)
    b.chain(4)
    assert draft.model.cached[:2] == b.tokens[:2]
    resets = []
    draft.model.reset = lambda orig=draft.model.reset: (resets.append(1), orig())[1]
    assert a.chain(4) == first and resets == [1]
    assert a.chain(4) == first and resets == [1]  # the same request again: kept


def test_no_room_no_chain():
    draft = _draft()
    f = draft.follower(b"hello " * 10)  # 20 of the model's 64 positions
    assert f.chain(3)[1]
    f.follow(b"hello " * 31 + b"hel")
    assert f.chain(3) == (b"", [])


def test_an_accepted_chain_is_not_read_again():
    """The chain stays in the draft's cache: when the committed text takes a prefix of it, the
    next chain re-reads only the boundary (the token kept back and what is new), never the
    accepted chain tokens; a chain that was not taken is dropped."""
    draft = _draft()
    model = draft.model
    f = draft.follower(b"hello hel")
    text, spans = f.chain(6)
    assert len(spans) == 6 and f.ahead
    assert model.n_past == len(f.tokens) - 1  # the chain's tokens (but the last) are cached
    before = model.prefilled
    f.follow(b"hello hel" + text + b"h")  # the whole chain accepted, then a token of the target's own
    again = f.chain(3)
    reread = model.prefilled - before
    assert reread <= 2  # without the chain kept it would be its six tokens and more
    # the chain is the draft's greedy continuation of the tokens it followed
    ctx, out = list(f.tokens[: len(f.tokens) - len(again[1])]), b""
    assert b"".join(TEXTS[t] for t in ctx) == f.committed
    for _ in again[1]:
        ctx.append(int(model.row(ctx).argmax()))
        out += TEXTS[ctx[-1]]
    assert out == again[0]
    # a chain the target did not take: its tokens leave the follower and the cache
    f.follow(f.committed + b"o")
    assert f.spelt == f.committed and not f.ahead
    f.chain(2)
    assert model.cached == f.tokens[: len(model.cached)]
