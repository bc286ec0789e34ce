"""Token bytes -> text pieces that are safe to show: complete UTF-8, and never a part of the
output that a stop string might still swallow.  Pure Python, no model.
"""

from __future__ import annotations

import codecs


class TextAssembler:
    """Feed token byte pieces; get back text that is final.

    ``push(piece)`` returns the text that became final (possibly ""); once a stop string has
    appeared, ``stopped`` is True and the text before it has been returned.  ``flush()`` returns
    whatever is still held back (call it when the generation ends without a stop string).
    """

    def __init__(self, stop: tuple[str, ...] = ()):
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = tuple(stop)
        self._held = ""
        self.stopped = False
        self.text = ""  # everything returned so far

    def push(self, piece: bytes) -> str:
        if self.stopped:
            return ""
        self._held += self._decoder.decode(piece)
        return self._release()

    def _release(self) -> str:
        held = self._held
        cut = None
        for s in self._stop:
            i = held.find(s)
            if i >= 0 and (cut is None or i < cut):
                cut = i
        if cut is not None:
            self.stopped = True
            self._held = ""
            return self._emit(held[:cut])
        keep = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(held)), 0, -1):
                if held.endswith(s[:n]):
                    keep = max(keep, n)
                    break
        out, self._held = held[: len(held) - keep], held[len(held) - keep :]
        return self._emit(out)

    def _emit(self, s: str) -> str:
        self.text += s
        return s

    def flush(self) -> str:
        if self.stopped:
            return ""
        rest = self._held + self._decoder.decode(b"", final=True)
        self._held = ""
        return self._emit(rest)
