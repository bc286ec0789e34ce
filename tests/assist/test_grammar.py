"""grammar.py on the tiny GGUF vocabulary (bytes as tokens, see tiny_gguf.py): ``Grammars``
compiles once per schema or grammar and keeps the 32 most recent, a schema that cannot be
compiled is a one-line ``GrammarError``, and a JSON-schema constraint's masks allow exactly
the bytes JSON valid under it may continue with (the end tokens where it is complete)."""

import pytest

from resispec_gguf.assist.grammar import Grammars, GrammarError, json_schema_grammar, lark_grammar
from resispec_gguf.errors import UserError
from resispec_gguf.kernels.sampling import mask_allows
from tiny_gguf import BYTE0_ID, EOS_ID, IM_END_ID, N_VOCAB


def _bytes(text: str) -> list[int]:
    """``text`` as the tiny vocabulary's byte tokens."""
    return [BYTE0_ID + b for b in text.encode()]


def _allowed(mask) -> set:
    """What ``mask`` allows: a byte's character, or a special token's id."""
    ids = [t for t in range(N_VOCAB) if mask_allows(mask, t)]
    return {chr(t - BYTE0_ID) if BYTE0_ID <= t < BYTE0_ID + 256 else t for t in ids}


class _Vocab:
    """The tiny target's vocabulary, counting how often the grammar engine's view is built."""

    def __init__(self, model):
        self.model = model
        self.n_vocab = model.n_vocab
        self.built = 0

    def grammar_tokenizer(self):
        self.built += 1
        return self.model.grammar_tokenizer()


@pytest.fixture(scope="module")
def vocab(engine):
    return _Vocab(engine.grammars.vocab)


@pytest.fixture
def grammars(vocab):
    return Grammars(vocab)


def _schema(i: int) -> dict:
    return {"type": "object", "properties": {f"k{i}": {"type": "integer"}}, "required": [f"k{i}"]}


def test_a_schema_is_compiled_once_and_the_vocabulary_read_once(grammars, vocab):
    built = vocab.built
    first = grammars.compile(json_schema=_schema(0))
    assert grammars.compile(json_schema=_schema(0)) is first
    assert grammars.compile(json_schema='{"type": "object", "properties": {"k0": {"type": "integer"}}, '
                                        '"required": ["k0"]}') is first  # its JSON text: the same grammar
    assert grammars.compile(json_schema=_schema(1)) is not first
    lark = grammars.compile(grammar='start: "yes" | "no"')
    assert grammars.compile(grammar='start: "yes" | "no"') is lark
    assert vocab.built == built + 1 and grammars.tokenizer() is grammars.tokenizer()


def test_the_32_most_recently_used_are_kept(grammars):
    kept = [grammars.compile(json_schema=_schema(i)) for i in range(32)]
    assert grammars.compile(json_schema=_schema(0)) is kept[0]  # used again: now the most recent
    grammars.compile(json_schema=_schema(32))  # a 33rd: the least recently used (1) goes
    assert len(grammars._compiled) == 32
    assert grammars.compile(json_schema=_schema(0)) is kept[0]
    assert all(grammars.compile(json_schema=_schema(i)) is kept[i] for i in range(3, 32))
    assert grammars.compile(json_schema=_schema(1)) is not kept[1]  # compiled anew


@pytest.mark.parametrize("kw,needle", [
    (dict(json_schema={"type": "nonsense"}), "invalid grammar: Invalid type: nonsense"),
    (dict(json_schema={"type": "integer", "minimum": 5, "maximum": 1}), "minimum (5) is greater than maximum (1)"),
    (dict(json_schema={"$ref": "#/nope"}), "/nope"),
    (dict(json_schema="{nope"), "the JSON schema is not valid JSON"),
    (dict(json_schema=False), "allows no value"),
    (dict(json_schema=[1]), "a JSON schema is an object or a boolean, got list"),
    (dict(json_schema="[" * (300 * 1024)), "larger than 256 KiB"),
    (dict(grammar="   "), "the grammar is empty"),
])
def test_a_bad_schema_or_grammar_is_a_one_line_grammar_error(grammars, kw, needle):
    with pytest.raises(GrammarError) as e:
        grammars.compile(**kw)
    assert needle in str(e.value) and "\n" not in str(e.value)
    assert isinstance(e.value, UserError)
    assert not grammars._compiled  # nothing half-compiled is kept


def test_exactly_one_of_a_schema_and_a_grammar(grammars):
    with pytest.raises(TypeError):
        grammars.compile()
    with pytest.raises(TypeError):
        grammars.compile(json_schema=True, grammar='start: "x"')


def test_json_schema_text_and_a_dict_are_the_same_grammar_and_true_is_any_object():
    assert json_schema_grammar({"type": "integer"}) == json_schema_grammar('{"type":  "integer"}')
    assert json_schema_grammar(True) == json_schema_grammar({"type": "object"})
    assert lark_grammar('root ::= "a"') != lark_grammar('root ::= "b"')


def test_masks_allow_what_may_continue_json_valid_under_the_schema(grammars):
    ends = {EOS_ID, IM_END_ID}
    boolean = grammars.compile(json_schema={"type": "boolean"})
    assert set(boolean.end_tokens) == ends
    state = boolean.start()
    assert _allowed(state.mask(())) == {"t", "f"}
    assert _allowed(state.mask(_bytes("tr"))) == {"u"}
    assert _allowed(state.mask(_bytes("f"))) == {"a"}
    assert _allowed(state.mask(_bytes("true"))) == ends  # complete: only the end
    assert _allowed(state.mask(_bytes("true") + [EOS_ID])) == ends  # nothing after an end token
    assert _allowed(state.mask(())) == {"t", "f"}  # a path's question leaves the state where it was

    integer = grammars.compile(json_schema={"type": "integer"}).start()
    assert _allowed(integer.mask(())) == set("-0123456789")
    assert _allowed(integer.mask(_bytes("-"))) == set("0123456789")
    assert set("0123456789") | ends <= _allowed(integer.mask(_bytes("12")))
    integer.advance(_bytes("-4"))  # committed: later paths start after it
    assert set("0123456789") | ends <= _allowed(integer.mask(()))
    assert "-" not in _allowed(integer.mask(()))


def test_where_the_grammar_allows_nothing_more_the_end_tokens_are_allowed(grammars):
    assert _allowed(grammars.compile(grammar='start: "ok"').start().mask(_bytes("ok"))) == {EOS_ID, IM_END_ID}
    assert _allowed(grammars.compile(grammar='start: ""').start().mask(())) == {EOS_ID, IM_END_ID}
