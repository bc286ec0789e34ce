"""What every mode of the comparison shares: its ``Options`` (the flags of ``bench --against``,
under the names the modes read), its one-line error, the llama-server rows of the agent mode,
our methods' settings, the progress notes and the JSON report.  Only the standard library and
the settings at import time: the command line's parser reads ``SPEC_ROWS`` from here."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import statistics
import sys

from ...errors import UserError

DEFAULT_TOKENS = 128
DEFAULT_CHAIN_DEPTH = 5

# (row label, --spec-type value or None for plain decoding, whether it needs the draft model)
SPEC_ROWS = (
    ("none", None, False),
    ("draft-simple", "draft-simple", True),
    ("ngram-mod", "ngram-mod", False),
    ("draft-simple,ngram-mod", "draft-simple,ngram-mod", True),
    ("ngram-cache", "ngram-cache", False),
)


class CompareError(UserError):
    """A one-line problem for the user (the command line prints it and exits with code 2)."""


@dataclasses.dataclass
class Options:
    """The comparison's settings: ``bench --against llama.cpp DIR`` and its flags (see
    ``docs/cli.md``); ``llama_cpp_bin`` is ``DIR``, ``threads`` and ``ctx`` are ``--threads``
    and ``--ctx``, ``concurrency`` the parsed ``--concurrency`` levels."""

    llama_cpp_bin: str
    target: str = "default"
    draft: str | None = None
    workload: str = "code,edit,chat"
    prompts: str | None = None
    n_prompts: int | None = None
    chain_depth: int = DEFAULT_CHAIN_DEPTH
    temperature: list = dataclasses.field(default_factory=lambda: [1.0, 0.6])
    max_tokens: int | None = None
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    threads: int | None = None
    ctx: int = 4096
    seed: int = 0
    draft_max: list | None = None
    methods: str | None = None
    spec_rows: list | None = None
    concurrency: list | None = None
    no_spec_simple: bool = False
    rounds: int = 1
    bench_reps: int = 1
    llama_backend_sampling: bool = False
    timeout: float = 900.0
    json: str | None = None


def parse_spec_rows(text: str) -> list[str]:
    """``--spec-rows``: ``;``-separated labels of ``SPEC_ROWS``."""
    labels = [t.strip() for t in text.split(";") if t.strip()]
    known = [label for label, _, _ in SPEC_ROWS]
    bad = [t for t in labels if t not in known]
    if bad or not labels:
        raise CompareError(f"unknown llama-server row {bad[0] if bad else text!r}; known: {'; '.join(known)}")
    return labels


def method_params(method: str, a):
    """Our method ``method``: ``chain`` is a depth-``--chain-depth`` chain, the others use the
    engine's default tree (auto: as upper bounds)."""
    from ...config import DraftParams

    if method == "chain":
        return DraftParams(method="chain", draws=1, depth=a.chain_depth, budget=a.chain_depth)
    return DraftParams(method=method)


def server_body(a, tokens, *, temp, seed, stream=False) -> dict:
    """llama-server's ``/completion`` request for prompt ``tokens`` under the options' sampling."""
    from .server_client import completion_body

    return completion_body(tokens, n=a.max_tokens, temp=temp, top_k=a.top_k, top_p=a.top_p, min_p=a.min_p,
                           seed=seed, stream=stream)


def note(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load_note() -> str:
    """The 1-minute load average, so that runs disturbed by other jobs show up in the log."""
    try:
        return f", load {os.getloadavg()[0]:.2f}"
    except (AttributeError, OSError):
        return ""


def fmt(x, spec):
    return format(x, spec) if x is not None else "-"


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def write_json(a, cfg, threads, body: dict) -> None:
    """The ``--json`` report: the options, the models, the machine, the prompts and ``body``."""
    config = dataclasses.asdict(a) if dataclasses.is_dataclass(a) else dict(vars(a))
    report = {
        "config": config,
        "models": {"target": str(cfg["target"]), "draft": str(cfg["draft"])},
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "threads": threads},
        "prompts": cfg["workloads"],
        **body,
    }
    try:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
    except OSError as e:
        raise CompareError(f"cannot write {a.json}: {e.strerror}") from None
