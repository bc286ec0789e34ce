"""Fill-in-the-middle: which tokens a model's vocabulary has for it, and how an infill prompt
is laid out with them.

Code models trained for infill mark the text before the cursor, the text after it and the
place to fill with special tokens, spelt per family (``FAMILIES``).  ``find_fim_tokens`` looks
them up among a vocabulary's special tokens; ``infill_prompt`` lays out a prompt in the
prefix-suffix-middle order llama.cpp's server uses for ``/infill`` (so editors tuned against it,
llama.vim and llama.vscode, get the prompt they expect), cutting what does not fit.

Pure: works on ``(text, id)`` pairs and a tokenize callable; never imports the engine or
llama_cpp.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

__all__ = ["FAMILIES", "FimFamily", "FimTokens", "find_fim_tokens", "infill_prompt"]


@dataclass(frozen=True)
class FimFamily:
    """A family's spellings (any one of each tuple): ``prefix``/``suffix``/``middle`` are
    required; ``repo`` (repository name) and ``file_sep`` (a file header) serve repo-level
    prompts with other files as context."""

    name: str
    prefix: tuple[str, ...]
    suffix: tuple[str, ...]
    middle: tuple[str, ...]
    repo: tuple[str, ...] = ()
    file_sep: tuple[str, ...] = ()


FAMILIES: tuple[FimFamily, ...] = (
    # Qwen2.5-Coder; CodeGemma spells the file header <|file_separator|>
    FimFamily("qwen", ("<|fim_prefix|>",), ("<|fim_suffix|>",), ("<|fim_middle|>",), ("<|repo_name|>",),
              ("<|file_sep|>", "<|file_separator|>")),
    # StarCoder 1/2, Granite code
    FimFamily("starcoder", ("<fim_prefix>",), ("<fim_suffix>",), ("<fim_middle>",), ("<reponame>",), ("<file_sep>",)),
    # SantaCoder
    FimFamily("santacoder", ("<fim-prefix>",), ("<fim-suffix>",), ("<fim-middle>",)),
    # Code Llama (SentencePiece spells them with a leading space mark)
    FimFamily("codellama", ("<PRE>", "\u2581<PRE>"), ("<SUF>", "\u2581<SUF>"), ("<MID>", "\u2581<MID>")),
    # DeepSeek-Coder
    FimFamily("deepseek", ("<\uff5cfim\u2581begin\uff5c>",), ("<\uff5cfim\u2581hole\uff5c>",), ("<\uff5cfim\u2581end\uff5c>",)),
)

# llama.cpp's /infill names the project and the current file so (it has no fields for them)
PROJECT_NAME = "myproject"
CURRENT_FILE = "filename"
# between context chunks when the family has no file header (llama.cpp's)
SNIPPET_SEPARATOR = "\n\n--- snippet ---\n\n"


@dataclass(frozen=True)
class FimTokens:
    """A vocabulary's FIM token ids; ``repo``/``file_sep`` None when it has none."""

    family: str
    prefix: int
    suffix: int
    middle: int
    repo: int | None = None
    file_sep: int | None = None


def find_fim_tokens(specials: Iterable[tuple[str, int]]) -> FimTokens | None:
    """The FIM tokens among a vocabulary's special tokens (``(text, id)`` pairs), the first
    family in ``FAMILIES`` whose prefix, suffix and middle are all there; None when none is."""
    ids: dict[str, int] = {}
    for text, i in specials:
        ids.setdefault(text, int(i))

    def first(spellings):
        return next((ids[s] for s in spellings if s in ids), None)

    for fam in FAMILIES:
        pre, suf, mid = first(fam.prefix), first(fam.suffix), first(fam.middle)
        if pre is not None and suf is not None and mid is not None:
            return FimTokens(fam.name, pre, suf, mid, first(fam.repo), first(fam.file_sep))
    return None


def infill_prompt(
    fim: FimTokens,
    tokenize: Callable[[str], list[int]],
    prefix: str,
    suffix: str,
    *,
    middle: str = "",
    extra: Sequence[tuple[str, str]] = (),
    repo_level: bool = False,
    budget: int,
) -> tuple[list[int], bool]:
    """The infill prompt's tokens and whether anything was cut to fit ``budget`` tokens.

    Layout (llama.cpp's ``/infill``; ``[X]`` a FIM token)::

        [REPO]myproject\\n                    -- repo_level, when the family has it
        [FILE_SEP]name\\n text  ...            -- each extra (filename, text); without a file
                                               -- header, SNIPPET_SEPARATOR text
        [FILE_SEP]filename\\n                  -- repo_level, when the family has it
        [PRE] prefix middle [SUF] suffix [MID]

    ``middle`` is text that follows the prefix (llama.cpp's ``prompt``: the cursor's line so
    far).  ``tokenize``: text -> ids with special-token parsing off, so that file contents stay
    text.  What does not fit is cut: the prefix loses its start and the suffix its end, the
    prefix getting three quarters of the room unless the suffix needs less; the extras take
    what is left, losing their start (the first files).  ``budget`` must hold the FIM tokens,
    the headers and ``middle``; else ``ValueError``.
    """
    pre, suf, mid = tokenize(prefix), tokenize(suffix), tokenize(middle)
    head: list[int] = []
    tail: list[int] = []
    if repo_level and fim.repo is not None:
        head = [fim.repo] + tokenize(PROJECT_NAME + "\n")
    if repo_level and fim.file_sep is not None:
        tail = [fim.file_sep] + tokenize(CURRENT_FILE + "\n")
    context: list[int] = []
    for filename, text in extra:
        if fim.file_sep is not None:
            context += [fim.file_sep] + tokenize(filename + "\n")
        else:
            context += tokenize(SNIPPET_SEPARATOR)
        context += tokenize(text)
    room = budget - (3 + len(mid) + len(head) + len(tail))
    if room < 0:
        raise ValueError(f"the infill prompt needs {budget - room} tokens before any prefix or suffix; "
                         f"only {budget} fit")
    n_suf = min(len(suf), max(room // 4, room - len(pre)))
    n_pre = min(len(pre), room - n_suf)
    n_ctx = min(len(context), room - n_pre - n_suf)
    truncated = n_pre < len(pre) or n_suf < len(suf) or n_ctx < len(context)
    body = [fim.prefix] + pre[len(pre) - n_pre:] + mid + [fim.suffix] + suf[:n_suf] + [fim.middle]
    return head + context[len(context) - n_ctx:] + tail + body, truncated
