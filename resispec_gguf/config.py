"""Settings: a few frozen, validated dataclasses, each setting described once.

Every field is a ``setting`` (``settings_schema``, which holds the schema: the field helper,
the checks ``Range`` and ``OneOf``, type coercion and validation) and carries in its
``metadata`` what a surface needs to offer it: its command-line flags, its help text, its
check and, when a request may set it, its request field.  The CLI's flags (``flags.py``),
chat's ``/set`` and the server's request fields (``server.fields``) are built from these
fields, and ``__post_init__`` runs the same checks, so a default or a bound is written here
and nowhere else.  This module holds the settings themselves and their own checks.

A bad value raises ``ConfigError``, whose ``field`` names the setting (the server reports it
as the error's ``param``).

No model, no I/O, no llama_cpp here.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

# the schema's names are read through this module too (``config.parse_field``, ``config.Range``...)
from .settings_schema import (ConfigError, Kind, OneOf, Range, Settings, find_setting, kind,  # noqa: F401
                              number_text, parse_field, request_fields, request_name, setting, settings, short_name)


SPEC_METHODS = ("chain", "specinfer", "rrs", "resispec")
METHODS = ("none",) + SPEC_METHODS + ("auto",)
TREE_POLICIES = ("budget", "static")

# The widest tree a step may build (target rows per verification call).  It also sizes the
# backend's sequence-id table.
MAX_TREE_NODES = 96
# a tree's bounds when ``depth``/``budget`` are unset: fixed methods, and auto (whose cost
# model keeps a step's tree smaller wherever more would not pay: long lookup runs and cheap
# target rows are where the room is used)
DEFAULT_DEPTH, DEFAULT_BUDGET = 5, 12
AUTO_DEPTH, AUTO_BUDGET = 16, 32

# The smallest context a model can be opened with.  ``Engine.load`` gives each context
# MAX_TREE_NODES + 2 sequences (the committed one, the tree's root and its nodes), and
# llama.cpp needs one output row per sequence in a batch, which never exceeds the context;
# below this it aborts the whole process.  (llama.cpp then rounds the context up to a
# multiple of 256 cells anyway.)
MIN_CTX = MAX_TREE_NODES + 2
# requests served at once (``--parallel``): each needs a sequence of its own, and its tree
# shares what is left of llama.cpp's 256 sequences with the others
MAX_SLOTS = 32
# the RAM prompt cache's default (``--cache-ram``): about 50k tokens of the default pair's
# KV state (28 KiB a token for the target, 12 KiB for the draft), a tenth of a 24 GiB machine
DEFAULT_CACHE_RAM_MIB = 2048
DEFAULT_MEMORY_TOKENS = 1_000_000  # past answers' tokens the memory keeps (about 170 MB of arrays)
MAX_MEMORY_TOKENS = 50_000_000
MAX_CACHE_RAM_MIB = 1 << 20


# ---------------------------------------------------------------------------------- checks


def _non_empty(name: str, value: str) -> None:
    if not value:
        raise ConfigError(name, f"{name} must be non-empty strings")


def rpc_endpoints(text: str) -> tuple[tuple[str, int], ...]:
    """``HOST:PORT[,HOST:PORT...]`` (``--rpc``) as ``(host, port)`` pairs, in order.

    Raises ``ValueError`` with a message naming the bad part.  A host is a name or an IPv4
    address: ggml's RPC client splits an endpoint at its first colon, so it cannot reach an
    IPv6 literal."""
    out = []
    for part in text.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(f"an RPC worker is HOST:PORT with a port in [1, 65535], got {part.strip()!r}")
        if any(c.isspace() for c in host):
            raise ValueError(f"an RPC worker's host is a name or an IPv4 address, without spaces, got {host!r}")
        if ":" in host or "[" in host:
            raise ValueError(f"an RPC worker's host is a name or an IPv4 address (ggml cannot reach IPv6 literals), got {host!r}")
        out.append((host, int(port)))
    return tuple(out)


def _rpc_list(name: str, value: str) -> None:
    try:
        rpc_endpoints(value)
    except ValueError as e:
        raise ConfigError(name, str(e)) from None


def _rpc_host(name: str, host: str) -> None:
    if not host or any(c.isspace() for c in host):
        raise ConfigError(name, f"{name} must be a host name or an IPv4 address, without spaces, got {host!r}")
    if ":" in host:
        raise ConfigError(name, f"{name} must be a host name or an IPv4 address (ggml's RPC server cannot "
                                f"bind IPv6 literals), got {host!r}")


def _bearer_key(name: str, key: str) -> None:
    """An empty key would turn auth off without a word, and one that is not printable ASCII
    without surrounding blanks can never match what a client sends."""
    if not key:
        raise ConfigError(name, f"{name} is empty; give a real key, or none to serve without auth")
    if not key.isascii() or not key.isprintable():
        raise ConfigError(name, f"{name} must be printable ASCII (an HTTP header cannot carry anything else)")
    if key != key.strip():
        raise ConfigError(name, f"{name} must not start or end with a blank")


# the bound OpenAI sets on a logit bias; -inf (llama.cpp's ``false``) bans a token outright
MAX_LOGIT_BIAS = 100.0


def _bias_entry(name: str, entry: tuple) -> None:
    """One ``(token id, bias)`` pair of ``SamplingParams.logit_bias``."""
    tid, bias = entry
    if tid < 0:
        raise ConfigError(name, f"{name}: a token id is >= 0, got {tid}")
    if not (-MAX_LOGIT_BIAS <= bias <= MAX_LOGIT_BIAS or bias == -math.inf):
        raise ConfigError(name, f"{name}: a bias is in [-{MAX_LOGIT_BIAS:g}, {MAX_LOGIT_BIAS:g}] or -inf (the token "
                                f"banned), got {number_text(bias)} for token {tid}")


def _bias_pairs(value) -> tuple:
    """``logit_bias`` as ``(id, bias)`` pairs sorted by id: from a mapping ``{id: bias}`` or
    pairs; ``ConfigError`` for another shape or an id named twice (the ranges are
    ``_bias_entry``'s)."""
    items = value.items() if isinstance(value, dict) else value
    try:
        pairs = [tuple(item) for item in items or ()]
    except TypeError:
        raise ConfigError("logit_bias", "logit_bias must be a mapping {token id: bias} or (token id, bias) "
                                        "pairs") from None
    out = []
    for pair in pairs:
        ok = len(pair) == 2 and isinstance(pair[0], numbers.Integral) and isinstance(pair[1], numbers.Real)
        if not ok or isinstance(pair[0], bool) or isinstance(pair[1], bool):
            raise ConfigError("logit_bias", f"logit_bias pairs are (token id, bias), got {pair!r}"[:160])
        out.append((int(pair[0]), float(pair[1])))
    out.sort()
    for a, b in zip(out, out[1:]):
        if a[0] == b[0]:
            raise ConfigError("logit_bias", f"logit_bias names token {a[0]} twice")
    return tuple(out)


def _cors_origin(name: str, origin: str) -> None:
    if not (origin == "*" or origin.startswith(("http://", "https://"))) or origin.endswith("/") \
            or origin.strip() != origin:
        raise ConfigError(name, f"a CORS origin is '*' or scheme://host[:port] without a path, got {origin!r}")


# ---------------------------------------------------------------------------------- the settings


@dataclass(frozen=True)
class SamplingParams(Settings):
    """How tokens are sampled: identical for plain and speculative decoding.

    ``temperature`` 0 is greedy.  ``top_k`` 0 and ``top_p`` 1 and ``min_p`` 0 disable those
    filters.  ``seed`` None draws a fresh seed per request.  ``stop``: strings that end the
    generation (not included in the output).  ``logit_bias``: ``(token id, bias)`` pairs (or
    a mapping ``{id: bias}``), each bias in [-100, 100] or -inf (banned), added to the
    target's logits before the constraint's mask and every filter (``docs/verification.md``).
    """

    temperature: float = setting(0.8, "--temp", "--temperature", help="sampling temperature (0 = greedy)",
                                 check=Range(0.0, 100.0), request=True)
    top_k: int = setting(40, "--top-k", help="keep the k most likely tokens (0 = off)", check=Range(0), request=True)
    top_p: float = setting(0.95, "--top-p", help="nucleus sampling mass (1 = off)", check=Range(0.0, 1.0, lo_open=True),
                           request=True)
    min_p: float = setting(0.05, "--min-p", help="drop tokens below min_p x the top probability (0 = off)",
                           check=Range(0.0, 1.0, hi_open=True), request=True)
    max_tokens: int = setting(512, "--max-tokens", "-n", help="maximum tokens to generate", check=Range(1),
                              request=True)
    seed: int | None = setting(None, "--seed", help="random seed (default: fresh each request)", check=Range(0),
                               unset=("none", "random", "-"), request=True)
    stop: tuple[str, ...] = setting((), "--stop", help="stop string (repeatable)", check=_non_empty, request=True)
    logit_bias: tuple[tuple, ...] = setting((), help="(token id, bias) pairs added to the logits (-inf: banned)",
                                            check=_bias_entry, request=True)

    def __post_init__(self):
        object.__setattr__(self, "logit_bias", _bias_pairs(self.logit_bias))
        super().__post_init__()

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class DraftParams(Settings):
    """How the draft tree is built and verified.

    ``method``: none (plain target decoding), chain, specinfer, rrs, resispec, or auto (the
    engine's cost model picks a tree shape or plain decoding per step, see ``autotune``).
    ``draws``: K candidates drawn at each expanded node (chain uses 1).  ``depth``: maximum
    tree depth.  ``budget``: maximum tree nodes per step (the ``budget`` policy).  Unset
    (None), those two take the method's defaults (``max_depth``/``max_budget``): 5 and 12,
    auto 16 and 32.
    ``draft_support``: the draft distribution's support cap.  ``policy``: ``budget``
    (best-first by estimated reach) or ``static`` (every distinct child expanded to
    ``depth``).  ``lookup``: every expanded node also gets a context-lookup candidate (the
    token that followed the longest earlier match of its context), checked before the draws;
    with no draft model the tree is lookup trees alone.  ``lookup_k``: the candidates per node
    from the request's context and from the engine's memory of past answers (``decoding.memory``),
    each at most.  ``use_memory`` False: the request reads its own context only.  ``views``: lookup
    also reads the prompt as JSON strings quote it (``decoding.candidates.views``).  ``auto`` always considers
    lookup, and treats ``draws``, ``depth`` and ``budget`` as upper bounds.  ``use_draft`` False:
    never call the draft model, even when one is loaded (trees are lookup chains alone, so
    it needs ``lookup``; auto considers lookup trees only); on the command line, ``--draft ''``.
    """

    method: str = setting("auto", "--method", help="verification method", check=OneOf(METHODS), request=True)
    draws: int = setting(4, "--draws", "-K", help="candidates drawn per expanded tree node (K; auto: at most)",
                         check=Range(1, 64), request=True)
    depth: int | None = setting(None, "--depth", help=f"maximum draft tree depth (default: {DEFAULT_DEPTH}; auto: "
                                                      f"up to {AUTO_DEPTH})", check=Range(1, 32), unset=("default",),
                                request=True)
    budget: int | None = setting(None, "--budget", help=f"maximum draft tree nodes per step (default: {DEFAULT_BUDGET}; "
                                                        f"auto: up to {AUTO_BUDGET})",
                                 check=Range(1, MAX_TREE_NODES), unset=("default",), request=True)
    draft_support: int = setting(64, "--draft-support", help="cap the draft distribution to its top N tokens",
                                 check=Range(1, 4096))
    policy: str = setting("budget", "--policy", help="tree policy", check=OneOf(TREE_POLICIES))
    lookup: bool = setting(False, "--lookup", help="add the context's and the memory's candidates at every tree "
                                                   "node (auto decides by itself)")
    use_draft: bool = setting(True, help="call the draft model when one is loaded (off: lookup chains alone)")
    lookup_k: int = setting(3, "--lookup-k", help="candidates per tree node from the context and from the memory of "
                                                  "past answers, each at most", check=Range(1, 8))
    use_memory: bool = setting(True, help="read the engine's memory of past answers (off: this request's own context)",
                               request="memory")
    views: bool = setting(True, "--views", help="lookup also reads the prompt escaped as a JSON string, and its JSON "
                                                "strings unescaped, as replies quote them", request=True)

    def __post_init__(self):
        super().__post_init__()
        if not self.use_draft and not self.lookup and self.method in SPEC_METHODS:
            raise ConfigError("use_draft", "without the draft model a tree needs lookup: set lookup or use_draft")
        if self.method == "rrs" and self.draws > self.draft_support:
            raise ConfigError("draws", "rrs draws without replacement: draws must not exceed draft_support")

    @property
    def max_depth(self) -> int:
        """``depth``, or the method's default when unset (auto's is larger: it grows a tree
        only as far as it pays)."""
        if self.depth is not None:
            return self.depth
        return AUTO_DEPTH if self.method == "auto" else DEFAULT_DEPTH

    @property
    def max_budget(self) -> int:
        """``budget``, or the method's default when unset."""
        if self.budget is not None:
            return self.budget
        return AUTO_BUDGET if self.method == "auto" else DEFAULT_BUDGET

    @property
    def k(self) -> int:
        """Draws per expanded node for this method."""
        return 1 if self.method == "chain" else self.draws

    @property
    def needs_draft(self) -> bool:
        """Whether this method can only run with a draft model (auto and lookup can draft
        from the context alone)."""
        return self.method in SPEC_METHODS and not self.lookup


#: The tool-call formats (``assist.formats``), for ``--tool-format``.
TOOL_FORMATS = ("hermes", "generic", "llama3", "mistral", "qwen3", "deepseek_r1")

_CTX_WHY = f"the engine opens {MIN_CTX} sequences and llama.cpp needs a batch row for each"


# the most tokens a reasoning budget may name (as the server's max_tokens bound)
MAX_REASONING_BUDGET = 1_000_000


@dataclass(frozen=True)
class ReasoningParams(Settings):
    """What a reasoning model's thinking (a ``<think>…</think>`` block) becomes.

    ``reasoning_format``: ``auto`` returns the thinking apart from the answer (OpenAI-style
    ``reasoning_content``) when the model has thinking markers; ``none`` leaves it in the
    text.  ``reasoning_budget``: the most tokens the thinking may take before only its
    closing marker is allowed (-1: no limit; 0: no thinking, and the template is asked for
    none with ``enable_thinking`` false).  A model without thinking markers ignores both.
    """

    reasoning_format: str = setting("auto", "--reasoning-format", help="auto: return a reasoning model's thinking "
                                                                       "apart from the answer; none: leave it in "
                                                                       "the text", check=OneOf(("none", "auto")),
                                    request=True)
    reasoning_budget: int = setting(-1, "--reasoning-budget", help="end a reasoning model's thinking after N tokens "
                                                                   "(-1: no limit, 0: no thinking)",
                                    check=Range(-1, MAX_REASONING_BUDGET), metavar="N", request=True)


@dataclass(frozen=True)
class ModelParams(Settings):
    """Which models to load and how (``Engine.load``).

    ``target``/``draft``: a path, ``hf:OWNER/REPO/FILE.gguf`` or a preset name.  ``draft``
    None: a preset target brings its own draft, any other target none; ``""``: no draft.
    ``n_ctx``/``n_batch``: each model's context and batch in tokens.  ``n_gpu_layers``:
    target layers offloaded to the GPU; ``draft_gpu_layers`` None: as many.  ``n_threads``
    None: all cores.  ``flash_attn`` None: off on the CPU alone, else llama.cpp decides.
    ``verbose``: let llama.cpp's own logging through.  ``rpc``: ``HOST:PORT[,HOST:PORT...]``
    of ggml RPC workers (``rpc-worker``) that hold the target's offloaded layers
    (``n_gpu_layers``) instead of local devices; the draft stays local.  ``tool_format``:
    how the target writes tool calls (None: read from its chat template).  ``n_slots``:
    requests served at once (``--parallel``), each with a context of ``n_ctx`` tokens of its
    own in one shared cache (``n_slots * n_ctx`` cells per model).  ``memory``: the file
    that keeps the memory of past answers across runs (``decoding.memory``; None: in memory
    only); ``memory_size``: the tokens it keeps (0: no memory).  ``cache_ram_mib``: the
    MiB of host memory that keep the KV state of prompts evicted from a slot, to restore them
    into whichever slot serves them again (``decoding.promptcache``; 0: none).
    """

    target: str = setting("default", "--target", help="target model: path, hf:OWNER/REPO/FILE.gguf or preset")
    draft: str | None = setting(None, "--draft", help="draft model: path, hf: spec or preset; '' for none (default: "
                                                      "a preset target's own draft, else none)", unset=())
    n_ctx: int = setting(4096, "--ctx", help="context size in tokens", check=Range(MIN_CTX, why=_CTX_WHY))
    n_gpu_layers: int = setting(0, "-ngl", "--n-gpu-layers", help="target layers offloaded to the GPU",
                                check=Range(0))
    draft_gpu_layers: int | None = setting(None, "-ngld", "--n-gpu-layers-draft",
                                           help="draft layers offloaded to the GPU (default: as -ngl)", check=Range(0))
    n_threads: int | None = setting(None, "--threads", help="CPU threads (default: all cores)", check=Range(1))
    n_batch: int = setting(512, help="tokens per llama.cpp batch", check=Range(MIN_CTX, why=_CTX_WHY))
    flash_attn: bool | None = setting(None, "--flash-attn", help="flash attention (default: off when the model runs "
                                                                 "on the CPU alone, where it makes speculative steps "
                                                                 "dearer; else llama.cpp decides)")
    verbose: bool = setting(False, "--verbose", help="show llama.cpp's own logging and auto's choices")
    tool_format: str | None = setting(None, "--tool-format", help="how the model writes tool calls: "
                                      + ", ".join(TOOL_FORMATS) + " (default: read from its chat template)",
                                      check=OneOf(TOOL_FORMATS), unset=(), metavar="NAME")
    rpc: str | None = setting(None, "--rpc", help="put the target's offloaded layers (-ngl) on these ggml RPC "
                                                  "workers, split by their memory (default: none, local devices)",
                              check=_rpc_list, unset=(), metavar="HOST:PORT[,HOST:PORT...]")
    n_slots: int = setting(1, "--parallel", help="requests served at once, each with its own --ctx tokens",
                           check=Range(1, MAX_SLOTS))
    memory: str | None = setting(None, "--memory", help="keep the memory of past answers in FILE: loaded at start, "
                                                        "saved on exit (default: in memory only)",
                                 unset=(), metavar="FILE", check=_non_empty)
    memory_size: int = setting(DEFAULT_MEMORY_TOKENS, "--memory-size", help="tokens of past answers the memory keeps, "
                                                                           "oldest answers dropped first (0: no memory)",
                               check=Range(0, MAX_MEMORY_TOKENS), metavar="TOKENS")
    cache_ram_mib: int = setting(DEFAULT_CACHE_RAM_MIB, "--cache-ram",
                                 help="keep the KV state of prompts evicted from a slot in up to MIB of RAM and "
                                      "restore it into whichever slot serves them again (0: off)",
                                 check=Range(0, MAX_CACHE_RAM_MIB), metavar="MIB")


@dataclass(frozen=True)
class ServerParams(Settings):
    """How ``serve`` listens and whom it answers (``server.create_app``, ``server.serve``).

    ``api_key``: required on every route but ``/health`` when set, as ``Authorization: Bearer
    KEY`` or Anthropic's ``x-api-key: KEY``; ``api_key_file``: a file holding it (its first
    line); with neither, ``RESISPEC_API_KEY`` (read by ``server.create_app``).  ``max_queue``: requests
    that may wait behind the running one.  ``cors_origins``: web origins whose pages may call
    the API (none by default).  ``model_name``: the id ``/v1/models`` reports (None: the CLI
    uses the target's file name, the library ``resispec-gguf``).
    """

    host: str = setting("127.0.0.1", "--host", help="bind address")
    port: int = setting(8000, "--port", help="port", check=Range(1, 65535))
    api_key: str | None = setting(None, "--api-key", help="require KEY ('Authorization: Bearer KEY' or 'x-api-key: "
                                                          "KEY') on every route but /health (default: "
                                                          "$RESISPEC_API_KEY, else no auth)", check=_bearer_key, unset=())
    api_key_file: str | None = setting(None, "--api-key-file", help="read the API key from the first line of FILE, "
                                                                    "kept off the command line (default: none)",
                                       check=_non_empty, unset=(), metavar="FILE")
    max_queue: int = setting(8, "--max-queue", help="requests allowed to wait", check=Range(0))
    cors_origins: tuple[str, ...] = setting((), "--cors-origin", help="let web pages from ORIGIN (https://host:port, "
                                                                     "or *) call the API (repeatable; default: none)",
                                            check=_cors_origin, metavar="ORIGIN")
    model_name: str | None = setting(None, "--model-name", help="model id reported by /v1/models (default: the "
                                                                "target's file name)", unset=())

    def __post_init__(self):
        super().__post_init__()
        if self.api_key is not None and self.api_key_file is not None:
            raise ConfigError("api_key_file", "give api_key or api_key_file, not both")


@dataclass(frozen=True)
class WorkerParams(Settings):
    """How ``rpc-worker`` serves this machine's device to a remote target (``rpc.run_worker``).

    ggml's RPC protocol has neither authentication nor encryption, so ``host`` is loopback
    unless ``allow_remote``.  ``cache_dir``: where the worker keeps large tensors it has
    received, so that a client that loads the same model again sends hashes instead of
    weights (None: no cache).
    """

    host: str = setting("127.0.0.1", "--host", help="bind address (loopback unless --allow-remote)",
                        check=_rpc_host)
    port: int = setting(50052, "--port", help="port", check=Range(1, 65535))
    n_threads: int | None = setting(None, "--threads", help="CPU threads (default: all cores)", check=Range(1))
    cache_dir: str | None = setting(None, "--cache", help="keep large received tensors in DIR, so the next load "
                                                          "of the same model skips the network (default: no cache)",
                                    unset=(), metavar="DIR")
    allow_remote: bool = setting(False, "--allow-remote", help="allow a non-loopback --host: anyone who can reach "
                                                               "the port can use this worker (no authentication)")
