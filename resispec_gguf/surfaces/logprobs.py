"""Logprobs in OpenAI's shapes: ``LogprobsFormatter`` turns the engine's ``TokenLogprob``
entries into a choice's ``logprobs`` object, chunk by chunk (chat's ``content`` list, or the
completions API's legacy lists with character offsets).

Used by the server and the in-process API.  May import nothing of the package; it gets
each token's bytes through a callable (``Engine.token_piece``), never from a model.
"""

from __future__ import annotations

import codecs
from typing import Callable

__all__ = ["MIN_LOGPROB", "LogprobsFormatter", "token_string"]

# OpenAI's stand-in for the log-probability of an impossible token (JSON has no infinity)
MIN_LOGPROB = -9999.0


def _logprob(x: float) -> float:
    return x if x > MIN_LOGPROB else MIN_LOGPROB


def token_string(piece: bytes) -> str:
    """A token's text for ``logprobs``: its bytes as UTF-8, a byte that is not (part of a
    character split across tokens) as ``\\xNN``; the exact bytes go in ``bytes``."""
    return piece.decode("utf-8", "backslashreplace")


class LogprobsFormatter:
    """``engine.TokenLogprob`` entries -> OpenAI's ``logprobs`` object, chunk by chunk.

    Chat: ``{"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}],
    "refusal": None}``.  Completions (the legacy shape): ``{tokens, token_logprobs,
    top_logprobs (a {token: logprob} dict per token), text_offset}``, offsets in characters
    from the start of the completion text.  Give ``format`` each chunk's entries in order: the
    lists of all chunks, concatenated, are those of one call with every entry.  ``piece``:
    token id -> the bytes it adds to the text (``Engine.token_piece``)."""

    def __init__(self, chat: bool, piece: Callable[[int], bytes]):
        self.chat = chat
        self.piece = piece
        self._chars = 0  # characters of completion text before the next token
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def _item(self, token: int, logprob: float) -> dict:
        b = self.piece(token)
        return {"token": token_string(b), "logprob": _logprob(logprob), "bytes": list(b)}

    def format(self, entries) -> dict:
        if self.chat:
            content = [{**self._item(e.token, e.logprob), "top_logprobs": [self._item(t, lp) for t, lp in e.top]}
                       for e in entries]
            return {"content": content, "refusal": None}
        out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for e in entries:
            b = self.piece(e.token)
            out["tokens"].append(token_string(b))
            out["token_logprobs"].append(_logprob(e.logprob))
            out["top_logprobs"].append({token_string(self.piece(t)): _logprob(lp) for t, lp in e.top})
            # where the token's text starts: after a character left incomplete, which the
            # text shows as U+FFFD once the next byte does not continue it
            out["text_offset"].append(self._chars + bool(self._decoder.getstate()[0]))
            self._chars += len(self._decoder.decode(b))
        return out
