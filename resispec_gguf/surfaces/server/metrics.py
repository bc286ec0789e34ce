"""``GET /metrics``: what the server's generations cost and how well speculation paid, in the
Prometheus text exposition format (version 0.0.4).

``Metrics`` sums every finished generation's ``Stats`` (job threads record, the route reads;
a lock keeps them apart).  ``exposition`` writes llama.cpp server's names where they exist
(``llamacpp:prompt_tokens_total``, ``llamacpp:tokens_predicted_total``, ``llamacpp:n_decode_total``,
the throughput gauges, ``llamacpp:requests_processing``/``requests_deferred``) and this
server's own under ``resispec:``: candidates verified and accepted (llama.cpp's
``draft_n``/``draft_n_accepted``), tau, acceptance by tree depth, target rows per step, and
steps and tokens by kind, which tell which candidate source paid (the draft model, context
lookup, the grammar's forced tokens, or plain decoding).

Pure Python over ``Stats`` fields; may import nothing of the server but is handed the worker's
load.  Never the engine or ``llama``.
"""

from __future__ import annotations

import math
import threading

__all__ = ["Metrics", "exposition", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# the Stats fields summed as they are
_SUMMED = ("prompt_time", "tokens", "eos_tokens", "steps", "target_calls", "draft_calls", "tree_nodes", "draft_time",
           "target_time", "total_time")


class Metrics:
    """Totals over the generations the server finished (cancelled ones included: their work
    was done)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.generations = 0
        self.prompt_tokens = 0  # evaluated, not reused from the cache
        self.prompt_reused = 0
        self.sums = dict.fromkeys(_SUMMED, 0)
        self.accepted_by_depth: list[int] = []
        self.reached_by_depth: list[int] = []
        self.steps_by_kind: dict[str, int] = {}
        self.tokens_by_kind: dict[str, int] = {}

    def record(self, stats) -> None:
        """Add one generation's ``Stats``."""
        with self._lock:
            self.generations += 1
            self.prompt_tokens += max(0, int(stats.prompt_tokens) - int(stats.prompt_reused))
            self.prompt_reused += int(stats.prompt_reused)
            for name in _SUMMED:
                self.sums[name] += getattr(stats, name)
            for mine, theirs in ((self.accepted_by_depth, stats.accepted_by_depth),
                                 (self.reached_by_depth, stats.reached_by_depth)):
                mine.extend([0] * (len(theirs) - len(mine)))
                for d, n in enumerate(theirs):
                    mine[d] += int(n)
            for mine, theirs in ((self.steps_by_kind, stats.steps_by_kind),
                                 (self.tokens_by_kind, getattr(stats, "tokens_by_kind", {}))):
                for kind, n in theirs.items():
                    mine[kind] = mine.get(kind, 0) + int(n)

    def snapshot(self) -> dict:
        """A consistent copy of the totals."""
        with self._lock:
            return {"generations": self.generations, "prompt_tokens": self.prompt_tokens,
                    "prompt_reused": self.prompt_reused, **self.sums,
                    "accepted_by_depth": list(self.accepted_by_depth), "reached_by_depth": list(self.reached_by_depth),
                    "steps_by_kind": dict(self.steps_by_kind), "tokens_by_kind": dict(self.tokens_by_kind)}


def _number(x) -> str:
    if isinstance(x, bool):
        return str(int(x))
    if isinstance(x, int):
        return str(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(float(x))


def _ratio(a, b) -> float:
    return a / b if b else 0.0


class _Writer:
    def __init__(self):
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str, samples) -> None:
        """One metric family: ``samples`` is a number, or ``(labels dict, number)`` pairs."""
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        if not isinstance(samples, list):
            samples = [({}, samples)]
        for labels, value in samples:
            label = ",".join(f'{k}="{v}"' for k, v in labels.items())
            self.lines.append(f"{name}{{{label}}} {_number(value)}" if label else f"{name} {_number(value)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def exposition(metrics: Metrics, load: dict) -> str:
    """The ``/metrics`` page: ``metrics``' totals and the worker's ``load`` (``busy``,
    ``waiting``)."""
    t = metrics.snapshot()
    w = _Writer()
    w.family("llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.", t["prompt_tokens"])
    w.family("llamacpp:prompt_seconds_total", "counter", "Prompt process time", t["prompt_time"])
    w.family("llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed.", t["tokens"])
    w.family("llamacpp:tokens_predicted_seconds_total", "counter", "Predict process time", t["total_time"])
    w.family("llamacpp:n_decode_total", "counter", "Total number of target decode calls made while generating "
             "(one per step, however many rows it verifies).", t["target_calls"])
    w.family("llamacpp:prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
             _ratio(t["prompt_tokens"], t["prompt_time"]))
    w.family("llamacpp:predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.",
             _ratio(t["tokens"], t["total_time"]))
    w.family("llamacpp:requests_processing", "gauge", "Number of requests processing.", load["busy"])
    w.family("llamacpp:requests_deferred", "gauge", "Number of requests deferred.", load["waiting"])
    _speculation(w, t)
    return w.text()


def _speculation(w: _Writer, t: dict) -> None:
    accepted = sum(t["accepted_by_depth"])
    w.family("resispec:generations_total", "counter", "Generations finished (cancelled ones included).",
             t["generations"])
    w.family("resispec:prompt_tokens_reused_total", "counter", "Prompt tokens whose KV cache was reused.",
             t["prompt_reused"])
    w.family("resispec:draft_tokens_total", "counter", "Draft candidate tokens the target verified "
             "(llama.cpp's draft_n).", t["tree_nodes"])
    w.family("resispec:draft_tokens_accepted_total", "counter", "Draft candidate tokens the target accepted "
             "(llama.cpp's draft_n_accepted).", accepted)
    w.family("resispec:draft_calls_total", "counter", "Draft model decode calls.", t["draft_calls"])
    w.family("resispec:steps_total", "counter", "Verification steps.", t["steps"])
    w.family("resispec:tau", "gauge", "Mean tokens per target call (accepted candidates plus the one each call "
             "gives anyway; 1 for plain decoding).", _ratio(t["tokens"] + t["eos_tokens"], t["target_calls"]))
    w.family("resispec:rows_per_step", "gauge", "Mean target rows per verification step (the root and the tree's "
             "candidates).", _ratio(t["steps"] + t["tree_nodes"], t["steps"]))
    depths = [str(d + 1) for d in range(len(t["reached_by_depth"]))]
    w.family("resispec:draft_reached_total", "counter", "Tree nodes verified, by depth.",
             [({"depth": d}, n) for d, n in zip(depths, t["reached_by_depth"])])
    w.family("resispec:draft_accepted_total", "counter", "Tree nodes with an accepted candidate, by depth.",
             [({"depth": d}, n) for d, n in zip(depths, t["accepted_by_depth"])])
    w.family("resispec:acceptance_rate", "gauge", "Accepted per verified tree node, by depth.",
             [({"depth": d}, _ratio(a, r)) for d, a, r in zip(depths, t["accepted_by_depth"], t["reached_by_depth"])])
    kinds = sorted(set(t["steps_by_kind"]) | set(t["tokens_by_kind"]))
    w.family("resispec:steps_by_kind_total", "counter", "Steps by candidate source: none (plain), draft (the draft "
             "model's tree), lookup (context lookup), grammar (the constraint's forced tokens).",
             [({"kind": k}, t["steps_by_kind"].get(k, 0)) for k in kinds])
    w.family("resispec:tokens_by_kind_total", "counter", "Tokens emitted by steps of each candidate source.",
             [({"kind": k}, t["tokens_by_kind"].get(k, 0)) for k in kinds])
    w.family("resispec:draft_seconds_total", "counter", "Time in draft model calls.", t["draft_time"])
    w.family("resispec:target_seconds_total", "counter", "Time in target model calls while generating.",
             t["target_time"])
