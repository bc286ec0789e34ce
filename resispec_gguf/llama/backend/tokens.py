"""The model's vocabulary: tokenizing, token pieces, special and end-of-generation tokens, the
GGUF metadata (chat template) and the vocabulary facts ``vocab`` compares (``Tokens``, a mixin
of ``model.LlamaModel``; ``llama_vocab_info`` for a ``llama_cpp.Llama``)."""

from __future__ import annotations

import ctypes

import llama_cpp as _ll

from ..vocab import TableTokenizer, VocabInfo
from ...errors import UserError


class Tokens:
    """``LlamaModel``'s vocabulary calls, on its ``_vocab`` and ``_model`` (llama.cpp's), with
    the caches ``LlamaModel.__init__`` sets up (``_specials``, ``_max_piece``, ``_pieces``,
    ``_eog``, the per-thread ``_local``) and its ``shown_specials``."""

    @property
    def bos(self) -> int:
        return int(_ll.llama_vocab_bos(self._vocab))

    @property
    def eos(self) -> int:
        return int(_ll.llama_vocab_eos(self._vocab))

    @property
    def add_bos(self) -> bool:
        return bool(_ll.llama_vocab_get_add_bos(self._vocab))

    def is_eog(self, token: int) -> bool:
        eog = self._eog.get(token)
        if eog is None:
            eog = self._eog[int(token)] = bool(_ll.llama_vocab_is_eog(self._vocab, int(token)))
        return eog

    @property
    def add_eos(self) -> bool:
        return bool(_ll.llama_vocab_get_add_eos(self._vocab))

    def special_tokens(self) -> list[tuple[str, int, bool, bool]]:
        """``(text, id, lstrip, rstrip)`` of every token that only ``parse_special=True`` makes
        out of text (control and unknown tokens), longest text first: the order in which
        llama.cpp looks for them.  Computed once."""
        if self._specials is None:
            attrs = _ll.LLAMA_TOKEN_ATTR_CONTROL | _ll.LLAMA_TOKEN_ATTR_UNKNOWN
            found = []
            for i in range(self.n_vocab):
                attr = int(_ll.llama_vocab_get_attr(self._vocab, i))
                if attr & attrs:
                    text = self.token_text(i)
                    if text:
                        found.append((len(text), i, text.decode("utf-8", "replace"),
                                      bool(attr & _ll.LLAMA_TOKEN_ATTR_LSTRIP), bool(attr & _ll.LLAMA_TOKEN_ATTR_RSTRIP)))
            found.sort(key=lambda f: (-f[0], f[1]))
            self._specials = [(text, i, lstrip, rstrip) for _, i, text, lstrip, rstrip in found]
        return self._specials

    def grammar_tokenizer(self):
        """The vocabulary as the grammar engine (llguidance) reads it, every end-of-generation
        token an end token, its tokenizer held to its token table (``vocab.TableTokenizer``).
        The table is llguidance's own reading of a llama.cpp vocabulary: each token's piece
        with special tokens shown, a control token (or a user-defined one spelled ``<...>``)
        after a 0xFF byte.  Slow (about a second at 152k tokens): the engine caches it."""
        try:
            import llguidance
        except ImportError as e:  # pragma: no cover - a dependency
            raise UserError(f"constrained generation needs llguidance: pip install llguidance ({e})") from None
        tokens, special = [], []
        for i in range(self.n_vocab):
            piece = self._piece(i, True)
            attr = int(_ll.llama_vocab_get_attr(self._vocab, i))
            if attr & _ll.LLAMA_TOKEN_ATTR_CONTROL or (
                    attr & _ll.LLAMA_TOKEN_ATTR_USER_DEFINED and piece.startswith(b"<") and piece.endswith(b">")):
                piece = b"\xff" + piece
                special.append(i)
            tokens.append(piece)
        eog = [i for i in range(self.n_vocab) if _ll.llama_vocab_is_eog(self._vocab, i)]
        table = TableTokenizer(tokens, special, lambda data: self.tokenize(data, add_special=False, parse_special=False),
                               eos=eog[0] if eog else self.eos, bos=self.bos)
        return llguidance.LLTokenizer(table, n_vocab=self.n_vocab, eos_token=eog or None)

    def tokenize(self, text: str | bytes, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        try:
            data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        except UnicodeEncodeError as e:
            raise UserError(f"the text is not valid Unicode (a lone surrogate at character {e.start})") from None
        cap = len(data) + 16
        buf = (_ll.llama_token * cap)()
        n = _ll.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (_ll.llama_token * cap)()
            n = _ll.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        return list(buf[:n])

    def token_piece(self, token: int, special: bool = False) -> bytes:
        """Bytes this token contributes to the text (possibly part of a UTF-8 character); a
        special token adds its text when ``special`` or when it is one of ``shown_specials``."""
        key = 2 * int(token) + bool(special or int(token) in self.shown_specials)
        got = self._pieces.get(key)
        if got is None:
            got = self._pieces[key] = self._piece(key >> 1, bool(key & 1))
        return got

    def _piece(self, token: int, special: bool) -> bytes:
        """``llama_token_to_piece``'s bytes, through a per-thread buffer."""
        piece = getattr(self._local, "piece", None)
        if piece is None:
            piece = self._local.piece = ctypes.create_string_buffer(256)
        n = _ll.llama_token_to_piece(self._vocab, int(token), piece, 256, 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = _ll.llama_token_to_piece(self._vocab, int(token), buf, -n, 0, special)
            return buf.raw[:n]
        return piece.raw[:n]

    def max_piece_bytes(self) -> int:
        """The most bytes of text any one token stands for (its piece; a control token's text).

        So a text of n bytes is at least ``n / max_piece_bytes()`` tokens.  Computed once, with
        a buffer of its own so that another thread may be decoding meanwhile."""
        if self._max_piece is None:
            buf = ctypes.create_string_buffer(256)
            longest = 1
            for i in range(self.n_vocab):
                n = _ll.llama_token_to_piece(self._vocab, i, buf, 256, 0, True)
                longest = max(longest, -n if n < 0 else n)
            self._max_piece = longest
        return self._max_piece

    def token_text(self, token: int) -> bytes:
        return _ll.llama_vocab_get_text(self._vocab, int(token)) or b""

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = _ll.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            _ll.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    def chat_template(self) -> str | None:
        return self.meta("tokenizer.chat_template")

    def vocab_info(self) -> VocabInfo:
        return _vocab_info(self._vocab)


def _vocab_info(v) -> VocabInfo:
    n = int(_ll.llama_vocab_n_tokens(v))
    return VocabInfo(
        vocab_type=int(_ll.llama_vocab_type(v)),
        n_vocab=n,
        bos=int(_ll.llama_vocab_bos(v)),
        eos=int(_ll.llama_vocab_eos(v)),
        add_bos=bool(_ll.llama_vocab_get_add_bos(v)),
        add_eos=bool(_ll.llama_vocab_get_add_eos(v)),
        texts=tuple(_ll.llama_vocab_get_text(v, i) or b"" for i in range(n)),
    )


def llama_vocab_info(llama) -> VocabInfo:
    """The vocabulary facts of a ``llama_cpp.Llama`` (what ``vocab.check_compatible`` compares)."""
    return _vocab_info(_ll.llama_model_get_vocab(llama.model))
