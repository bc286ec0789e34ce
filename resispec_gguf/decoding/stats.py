"""What a generation returns: its ``Result`` (tokens, text, finish reason, seed), the
``Stats`` of what it cost and how well the draft did, and per-token ``TokenLogprob``s.

Plain data; imports nothing of the package.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

__all__ = ["Result", "Stats", "TokenLogprob"]


@dataclass
class Stats:
    """What a generation cost and how well the draft did.

    ``tokens`` counts the output tokens; ``eos_tokens`` the end-of-generation token that
    ended the reply (0 or 1 per reply): not output, but a target call produced it.
    ``accepted_by_depth[d]`` counts draws accepted at depth d+1 of the tree and
    ``reached_by_depth[d]`` the verifications done there, so their ratio is the acceptance
    rate per depth.  ``steps_by_kind``/``tokens_by_kind``: steps of each kind (plain "none",
    "draft" model trees, context "lookup" chains, "grammar"-forced chains) and the output tokens
    they gave (summing to ``tokens``), which says which candidate source paid;
    ``candidates``: per candidate source, the candidates it offered at verified nodes and how
    many of them were accepted.  Times are seconds; ``overhead_time`` is everything outside model calls.
    ``prompt_time`` is the prompt's processing before the first step (``total_time`` and the
    decode speed leave it out); ``prompt_target_time``/``prompt_draft_time`` are its target's
    and draft's parts (prefill, or a prompt-cache restore), the rest (``prompt_host_time``)
    host work between them.
    Kernels are compiled and ``auto``'s costs measured at load (``Engine.prepare``), so no
    time here is start-up.
    """

    method: str = "none"
    prompt_tokens: int = 0
    prompt_reused: int = 0  # prompt tokens whose KV cache was reused from the previous call
    prompt_time: float = 0.0
    prompt_target_time: float = 0.0
    prompt_draft_time: float = 0.0
    tokens: int = 0
    eos_tokens: int = 0
    steps: int = 0
    target_calls: int = 0
    draft_calls: int = 0
    tree_nodes: int = 0
    accepted_by_depth: list[int] = field(default_factory=list)
    reached_by_depth: list[int] = field(default_factory=list)
    draft_time: float = 0.0
    draft_sync_time: float = 0.0  # the draft catching up: a prompt it skipped at a lazy start, or after plain steps
    target_time: float = 0.0
    total_time: float = 0.0
    steps_by_kind: dict = field(default_factory=dict)  # "none" / "draft" / "lookup" / "grammar" -> steps
    tokens_by_kind: dict = field(default_factory=dict)  # the same kinds -> output tokens of their steps
    mask_seconds: list = field(default_factory=list)  # under a constraint: time of each mask computed
    # per candidate source (``decoding.candidates``): [candidates offered at verified nodes, accepted]
    candidates: dict = field(default_factory=dict)
    auto: str = ""  # what auto chose last and why
    # auto: per kind of step ("none" for plain, else its arm) [steps, predicted s, measured s]
    step_times: dict = field(default_factory=dict)

    @property
    def overhead_time(self) -> float:
        return max(0.0, self.total_time - self.draft_time - self.draft_sync_time - self.target_time)

    @property
    def prompt_host_time(self) -> float:
        return max(0.0, self.prompt_time - self.prompt_target_time - self.prompt_draft_time)

    @property
    def end_to_end_time(self) -> float:
        """Prompt processing and decoding: what a request waits for its whole reply."""
        return self.prompt_time + self.total_time

    @property
    def end_to_end_tokens_per_s(self) -> float:
        """Output tokens per second of ``end_to_end_time`` (``tokens_per_s`` is decode only)."""
        return self.tokens / self.end_to_end_time if self.end_to_end_time > 0 else 0.0

    @property
    def tau(self) -> float | None:
        """Tokens per target call, counting the end-of-generation token a call produced: 1.0
        for plain decoding, more when speculation paid.  None before any target call."""
        return (self.tokens + self.eos_tokens) / self.target_calls if self.target_calls else None

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.total_time if self.total_time > 0 else 0.0

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted draws per verified draw, over all depths; None when nothing was
        speculated (plain steps only)."""
        reached = sum(self.reached_by_depth)
        return sum(self.accepted_by_depth) / reached if reached else None

    @property
    def acceptance_by_depth(self) -> list[float | None]:
        """Acceptance rate per tree depth (None where no draw was verified)."""
        return [a / r if r else None for a, r in zip(self.accepted_by_depth, self.reached_by_depth)]

    @property
    def nodes_per_step(self) -> float:
        return self.tree_nodes / self.steps if self.steps else 0.0

    def _grow(self, depth: int) -> None:
        while len(self.reached_by_depth) < depth:
            self.reached_by_depth.append(0)
            self.accepted_by_depth.append(0)

    def count_node(self, depth: int, accepted: bool) -> None:
        """A node at ``depth`` was verified; ``accepted``: a candidate of it was."""
        self._grow(depth)
        self.reached_by_depth[depth - 1] += 1
        self.accepted_by_depth[depth - 1] += int(accepted)

    def merge(self, other: "Stats") -> None:
        for name in ("prompt_tokens", "prompt_reused", "prompt_time", "prompt_target_time", "prompt_draft_time",
                     "tokens", "eos_tokens", "steps", "target_calls", "draft_calls", "tree_nodes", "draft_time",
                     "draft_sync_time", "target_time", "total_time"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.mask_seconds += other.mask_seconds
        for mine, theirs in ((self.steps_by_kind, other.steps_by_kind), (self.tokens_by_kind, other.tokens_by_kind)):
            for kind, n in theirs.items():
                mine[kind] = mine.get(kind, 0) + n
        for name, (offered, accepted) in other.candidates.items():
            mine = self.candidates.setdefault(name, [0, 0])
            mine[0] += offered
            mine[1] += accepted
        self.auto = other.auto or self.auto
        for kind, figures in other.step_times.items():
            mine = self.step_times.setdefault(kind, [0, 0.0, 0.0])
            for i, x in enumerate(figures):
                mine[i] += x
        self._grow(len(other.reached_by_depth))
        for d, (a, r) in enumerate(zip(other.accepted_by_depth, other.reached_by_depth)):
            self.accepted_by_depth[d] += a
            self.reached_by_depth[d] += r
        self.method = other.method

    def as_dict(self) -> dict:
        return {
            "method": self.method,
            "prompt_tokens": self.prompt_tokens,
            "prompt_reused": self.prompt_reused,
            "tokens": self.tokens,
            "eos_tokens": self.eos_tokens,
            "steps": self.steps,
            "target_calls": self.target_calls,
            "draft_calls": self.draft_calls,
            "tau": self.tau,
            "tokens_per_s": self.tokens_per_s,
            "acceptance_rate": self.acceptance_rate,
            "accepted_by_depth": list(self.accepted_by_depth),
            "reached_by_depth": list(self.reached_by_depth),
            "nodes_per_step": self.nodes_per_step,
            "draft_time_s": self.draft_time,
            "draft_sync_time_s": self.draft_sync_time,
            "target_time_s": self.target_time,
            "overhead_time_s": self.overhead_time,
            "total_time_s": self.total_time,
            "prompt_time_s": self.prompt_time,
            "prompt_target_time_s": self.prompt_target_time,
            "prompt_draft_time_s": self.prompt_draft_time,
            "prompt_host_time_s": self.prompt_host_time,
            "end_to_end_tokens_per_s": self.end_to_end_tokens_per_s,
            "steps_by_kind": dict(self.steps_by_kind),
            "tokens_by_kind": dict(self.tokens_by_kind),
            "step_times": {k: list(v) for k, v in self.step_times.items()},
            "candidates": {name: {"offered": o, "accepted": a} for name, (o, a) in self.candidates.items()},
            "masks": len(self.mask_seconds),
            "mask_ms_median": 1000 * float(np.median(self.mask_seconds)) if self.mask_seconds else None,
            "auto": self.auto,
        }


class TokenLogprob(NamedTuple):
    """One emitted token's log-probability under the target at temperature 1 before any
    filter (the model's own distribution, as OpenAI and vLLM report it), read from the row the
    token was verified or sampled against, and the ``top`` most likely tokens there as
    ``(token, logprob)`` pairs, descending."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]


@dataclass
class Result:
    tokens: list[int]
    text: str
    # "stop" (a stop string), "eos" (an end-of-generation token), "length" (max_tokens or the
    # context), "error" (the constraint failed: ``error`` says why), "interrupted" (the
    # stream was closed or raised before the end)
    finish_reason: str
    stats: Stats
    seed: int
    # one entry per token of ``tokens`` when the request asked for logprobs, else None
    logprobs: list[TokenLogprob] | None = None
    error: str | None = None  # with finish_reason "error": the constraint's one-line message
    fault: bool = False  # with finish_reason "error": the failure was ours (``errors.ConstraintFault``)
