"""The public ``Engine``: the one place that joins the layers.

It opens models (``llama.loading``), prepares kernels and ``auto``'s cost curves
(``kernels.warmup``, ``decoding.costs``), builds prompts and constraints (``assist``), and runs
each request as a ``decoding.generation.Generation`` through ``decoding.loop``.  It never prints; it
returns text, tokens and a ``Stats`` object, and reports preparation through a callback.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator

import numpy as np

from .assist.chatmodel import ChatFormats
from .assist.grammar import Grammars
from .assist.prompts import Prompts
from .config import TOOL_FORMATS, ConfigError, DraftParams, ModelParams, OneOf, SamplingParams
from .errors import UserError
from .kernels import warmup
from .progress import slow_note, steps as progress_steps
from .decoding import autorequest, autotune, costcheck, loop, standby, suffix_index
from .decoding.candidates import views
from .decoding.candidates.context import uses_lookup
from .decoding import batch as batching
from .decoding.memory import Memory, vocab_key
from .decoding.seeding import Ledger
from .decoding.textdraft import TextDraft
from .decoding.promptcache import PromptCache
from .decoding.runner import Runner, Ticket
from .decoding.generation import Generation
from .decoding.protocol import Constraint, ModelBackend
from .decoding.stats import Result, Stats, TokenLogprob

__all__ = ["Engine", "Result", "Stats", "TokenLogprob"]


def open_memory(params: ModelParams, target) -> tuple[Memory | None, str | None]:
    """The memory of past answers ``params`` asks for (``memory_size`` 0: none), read from
    its file if there is one, and the one-line warning when that file was unusable."""
    if params.memory_size <= 0:
        return None, None
    key = vocab_key(target) if params.memory is not None else ""
    return Memory.open(params.memory, key, params.memory_size)


class Engine:
    """A target model, optionally a draft model, and the speculative loop between them.

    Use ``Engine.load(...)``; it is a context manager that frees both models.  Generation
    needs only the ``protocol.ModelBackend`` seam; the prompt builders (``engine.prompts``:
    ``text_tokens``, ``chat_tokens``, ``infill_tokens``) also use the target's vocabulary
    (``tokenize``, ``token_text``, ``special_tokens``, ``bos``/``eos``), constraints
    (``engine.grammars``) its ``grammar_tokenizer``, and ``info``/``reference_logits`` its
    ``describe`` and ``logits_of_sequence`` (``backend.LlamaModel`` has them all).  Surfaces
    use this class only, never the models behind it.
    """

    def __init__(self, target: ModelBackend, draft: ModelBackend | None = None, *,
                 chat_template: str | None = None, cost_curves=None, tool_format: str | None = None,
                 cache_ram_mib: int = 0, memory: Memory | None | str = "default", correct_costs: bool | None = None):
        """``target``/``draft``: any ``protocol.ModelBackend``.  ``cost_curves``: the
        ``(target, draft)`` ``autotune.CostCurve`` pair for ``auto``; when not given,
        measured (and cached on disk) by ``prepare``, which ``load`` calls, or else on the
        first auto request.  ``tool_format``: a ``formats.FORMATS`` name that overrides the
        tool-call format read from the chat template.  ``cache_ram_mib``: the RAM prompt cache
        (``decoding.promptcache``; ``ModelParams.cache_ram_mib``, which ``load`` passes), 0 for
        none.  ``memory``: the memory of past answers every request reads and adds to
        (``decoding.memory.Memory``; "default": a new one, in memory only; None: none).
        ``correct_costs``: correct the curves from measured steps between requests
        (``decoding.costcheck``; None: unless ``$RESISPEC_COST_CHECK=0``)."""
        self.target = target
        # a draft of another vocabulary is read through text (``decoding.textdraft``): a candidate
        # source's store, not a draft the loop decodes
        self.text_draft = draft.bind(self._text_codec()) if isinstance(draft, TextDraft) else None
        self.draft = None if self.text_draft is not None else draft
        self._owns_models = True  # ``close`` frees them (not a pool's: ``from_pool``)
        self.n_vocab = target.n_vocab
        self._local = threading.local()  # ``last_result``, per calling thread
        self._runner: Runner | None = None
        self._runner_lock = threading.Lock()
        # what auto's plans cost here: the curves (as corrected), host time per row, the outlook
        self.costs = costcheck.AutoCosts(target, self.draft, cost_curves, correct_costs, self.text_draft)
        self.n_threads = target.n_threads
        self.prompts = Prompts(target, chat_template)  # chat, plain and infill prompts
        self.grammars = Grammars(target)  # constraints compiled against the target's vocabulary
        if tool_format is not None:
            OneOf(TOOL_FORMATS)("tool_format", tool_format)  # ConfigError, as ModelParams'
        # its tool format and thinking markers; with ``prompts`` and ``grammars``, what chat
        # planning reads (``assist.chatmodel.ChatModel``: the engine is handed to it as one)
        self.chat_formats = ChatFormats(target, chat_template, self.grammars.tokenizer, tool_format)
        if cache_ram_mib < 0:
            raise ValueError(f"cache_ram_mib must be >= 0, got {cache_ram_mib}")
        # one RAM prompt cache for every batch of this engine (they share the models' slots),
        # or for ``loop``'s one sequence with a single slot
        self.prompt_cache = PromptCache(int(cache_ram_mib) << 20) if cache_ram_mib else None
        self.memory: Memory | None = Memory() if memory == "default" else memory
        self._ledger = Ledger()  # the seed ledger when there is no memory to keep it (``ledger``)
        self.memory_warning: str | None = None  # why a memory file could not be read (one line)
        self.standby: standby.DraftStandby | None = None  # closes a draft auto stopped calling (one slot)
        self.save_warning: str | None = None  # why ``close`` could not write it (one line)

    @classmethod
    def load(cls, target: ModelParams | str | None = None, draft: str | None = None, *, progress: bool = True,
             note: Callable[[str], None] | None = None, correct_costs: bool | None = None,
             **settings) -> "Engine":
        """Load a target and a draft as a ``config.ModelParams`` says: pass one, or its fields
        as arguments, e.g. ``Engine.load("default", n_ctx=8192)`` or
        ``Engine.load("t.gguf", "d.gguf", n_threads=4, flash_attn=False)``.

        ``target``/``draft`` are paths, ``hf:`` specs or preset names; a preset target with no
        draft brings its own draft, any other target loads none unless ``draft`` names one;
        ``draft=""`` loads none (then ``auto`` and ``lookup=True`` draft from the context
        only).  ``progress``: report model downloads on stderr, and ``prepare``'s work on a
        terminal; ``note(line)``: told before slow preparation (``prepare``); ``correct_costs``:
        ``Engine``'s.  A bad setting raises
        ``config.ConfigError``, a model that cannot be found, read or paired ``UserError``."""
        if isinstance(target, ModelParams):
            if draft is not None or settings:
                raise TypeError("Engine.load takes a ModelParams or its fields as arguments, not both")
            params = target
        else:
            named = {"target": target, "draft": draft}
            params = ModelParams(**{k: v for k, v in named.items() if v is not None}, **settings)
        from .llama import loading  # here: importing the package must not load llama_cpp

        t, d = loading.open_pair(params, progress=progress)
        memory, warning = open_memory(params, t)
        engine = cls(t, d, chat_template=t.chat_template(), tool_format=params.tool_format,
                     cache_ram_mib=params.cache_ram_mib, memory=memory, correct_costs=correct_costs)
        engine.memory_warning = warning
        engine.costs.note = note
        if params.n_slots == 1 and engine.draft is not None:
            engine.standby = standby.DraftStandby(lambda: loading.reopen_draft(params, d.path))
        try:
            engine.prepare(progress=progress)
        except BaseException:
            engine.close()
            raise
        return engine

    @classmethod
    def from_pool(cls, pool, target: str, draft: str | None = None, *, prepare: bool = True,
                  progress: bool = False) -> "Engine":
        """An engine over models of a ``llama.loading.ModelPool`` (opened there on first use,
        with the pool's settings), prepared as ``load`` prepares one: engines made from one
        pool share its models, so a target opened once serves every draft paired with it.
        Closing the engine leaves the models open (``pool.close()`` frees them).  ``draft``
        None: none.  ``prepare`` False: not prepared (an engine that only reads
        ``reference_logits`` or decodes plainly needs no cost curves).  A model that cannot
        be opened, or a draft whose vocabulary does not match the target's, raises
        ``UserError``."""
        t, d = pool.pair(target, draft)
        memory, warning = open_memory(pool.params, t)
        engine = cls(t, d, chat_template=t.chat_template(), tool_format=pool.params.tool_format,
                     cache_ram_mib=pool.params.cache_ram_mib, memory=memory)
        engine.memory_warning = warning
        engine._owns_models = False
        try:
            if prepare:
                engine.prepare(progress=progress)
        except BaseException:
            engine.close()
            raise
        return engine

    def prepare(self, progress: bool | Callable[[int, int], None] = False) -> None:
        """Make the first reply as fast as the next: compile every kernel a generation runs
        (or load it from Numba's cache) and measure what ``auto`` needs (the cost curves and
        the host time per logits row; measured once per model file and settings, cached on
        disk).  ``Engine.load`` calls it; an engine built from backends directly measures
        on its first ``auto`` request unless this is called.  ``progress``: a
        ``report(done, total)`` callback, or True for a "preparing kernels" bar on stderr,
        erased when done, when stderr is a terminal (a script's or a server's log gets no
        bar).  ``note`` (``load``'s) is told, one line, when compiling the kernels takes more
        than a second and before a cost curve is measured."""
        kernels = [*warmup.warm_ups(), autotune.warm_up, suffix_index.warm_up, self._auto_row_seconds]
        report = progress_steps("preparing kernels") if progress is True else progress or None
        if report:
            report(0, len(kernels) + 1)
        with slow_note(self.costs.note, costcheck.COMPILING, costcheck.SLOW_S):  # one line, however many steps
            for i, step in enumerate(kernels):
                step()
                if report:
                    report(i + 1, len(kernels) + 1)
        self._auto_curves()  # says itself when it measures
        if report:
            report(len(kernels) + 1, len(kernels) + 1)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Stop the engine's runner, save the memory to its file (if it has one) and free the
        models (those of a pool stay open).  A memory file that cannot be written is one
        line in ``save_warning``; nothing else is lost."""
        if self._runner is not None:
            self._runner.stop()
        self.save_warning = self.save_memory()
        if not self._owns_models:
            return
        for m in (self.target, self.draft, self.text_draft):
            if m is not None:
                m.close()

    def save_memory(self) -> str | None:
        """Write the memory of past answers to its file (``ModelParams.memory``), if it has
        one; returns the one line saying why it could not be written (None when it was, or
        there is no file)."""
        if self.memory is None or self.memory.path is None:
            return None
        try:
            self.memory.save()
        except OSError as e:
            return f"memory file {self.memory.path}: not saved ({e.strerror or e})"
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ what is loaded

    @property
    def has_draft(self) -> bool:
        return self.draft is not None or self.text_draft is not None or bool(self.standby and self.standby.released)

    @property
    def n_ctx(self) -> int:
        """The target's context in tokens (per slot): prompt plus output never exceed it."""
        return self.target.n_ctx

    @property
    def n_slots(self) -> int:
        """Requests that run at once (``ModelParams.n_slots``, ``--parallel``)."""
        return int(getattr(self.target, "n_slots", 1))

    @property
    def last_result(self) -> Result | None:
        """The ``Result`` of this thread's last ``stream``/``generate`` (each thread sees its
        own, so that threads streaming at once each read theirs)."""
        return getattr(self._local, "result", None)

    @last_result.setter
    def last_result(self, value: Result | None) -> None:
        self._local.result = value

    def kv_bytes(self) -> int:
        """Bytes of both models' KV caches (``LlamaModel.kv_bytes``; 0 where not said)."""
        return sum(int(getattr(m, "kv_bytes", lambda: 0)()) for m in (self.target, self.draft) if m is not None)

    def slots(self) -> tuple[int, int, int]:
        """``(busy, idle, waiting)``: slots running a request, free slots, requests waiting
        for one (all idle before the first ``submit``)."""
        r = self._runner
        if r is None:
            return 0, self.n_slots, 0
        return r.busy, r.idle, r.waiting

    def info(self) -> dict:
        """What is loaded, for reports: per model (``"target"``, ``"draft"`` or None) the
        backend's ``describe()``: file path, context, batch, threads, GPU layers, flash
        attention, RPC workers, the backend library's version and whether it can offload to a
        GPU."""
        draft = self.text_draft or self.draft
        closed = self.standby.described if self.standby is not None and self.standby.released else None
        return {"target": self.target.describe(), "draft": draft.describe() if draft is not None else closed}

    def check_draft_params(self, dp: DraftParams) -> None:
        """``UserError`` when ``dp`` cannot run on these models (a method that needs a draft
        model, without one)."""
        if dp.needs_draft and not self.has_draft:
            raise UserError(f"method {dp.method!r} needs a draft model or lookup=True; load one or use method "
                            "'auto' or 'none'")

    def reference_logits(self, tokens: list[int], *, draft: bool = False) -> np.ndarray:
        """The target's (or the draft's) logits after each of ``tokens``, ``[n, V]`` float32,
        decoded one sequence from an empty cache: the reference the tree decodes are
        checked against.  Leaves that model's cache holding ``tokens``."""
        if draft and self.draft is None and self.standby is not None and self.standby.released:
            self.draft = self.standby.open()
        model = self.draft if draft else self.target
        if model is None:
            raise UserError("no draft model is loaded")
        return model.logits_of_sequence(tokens)

    # ------------------------------------------------------------------ auto

    def _tuner(self, dp: DraftParams, context: int = 0) -> autotune.AutoTuner:
        """A fresh AutoTuner per request on the engine's cost curves (measured once per model
        file and settings, cached on disk).  Fresh, so that its choices — and with them the
        output — depend only on the request, its seed and this machine; a request that reads
        the memory of past answers also starts from what the last one learnt of their
        candidates (``Memory.learnt``, set in ``_generation``).  ``dp``'s draws, depth and
        budget bound what it may choose; ``context``: the prompt's length."""
        return self.costs.tuner(dp, self.draft is not None and dp.use_draft, context)

    def _auto_curves(self):
        return self.costs.curves()

    def _auto_row_seconds(self) -> float:
        return self.costs.row_seconds()

    def auto_outlook(self) -> str:
        """What ``auto`` expects on these models and this machine, in one sentence, for the
        start-up line (``costcheck.outlook``)."""
        return self.costs.outlook(self.info() if hasattr(self.target, "describe") else {})

    # ------------------------------------------------------------------ prompts (``engine.prompts``)

    @property
    def chat_template(self) -> str | None:
        return self.prompts.chat_template

    @property
    def fim_tokens(self):
        """The target's fill-in-the-middle tokens (``fim.FimTokens``), None when it has none."""
        return self.prompts.fim_tokens

    def infill_tokens(self, prefix: str, suffix: str, **layout) -> tuple[list[int], bool]:
        """``Prompts.infill_tokens``: a fill-in-the-middle prompt and whether it was cut."""
        return self.prompts.infill_tokens(prefix, suffix, **layout)

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True, tools=None,
                    template_kwargs: dict | None = None) -> str:
        return self.prompts.render_chat(messages, add_generation_prompt, tools, template_kwargs)

    @property
    def max_prompt_bytes(self) -> int:
        return self.prompts.max_prompt_bytes

    def text_tokens(self, text: str) -> list[int]:
        """``Prompts.text_tokens``: a plain prompt's tokens (BOS added unless the text has it)."""
        return self.prompts.text_tokens(text)

    def chat_tokens(self, messages: list[dict], add_generation_prompt: bool = True, tools=None,
                    template_kwargs: dict | None = None) -> list[int]:
        """``Prompts.chat_tokens``: a chat rendered with the template, contents kept as text;
        ``template_kwargs``: more template variables (``chat_template_kwargs``)."""
        return self.prompts.chat_tokens(messages, add_generation_prompt, tools, template_kwargs)

    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """``Prompts.tokenize``: ``text``'s tokens, llama.cpp's ``/tokenize`` way."""
        return self.prompts.tokenize(text, add_special, parse_special)

    def detokenize(self, tokens) -> bytes:
        """``Prompts.detokenize``: the bytes of ``tokens`` (ids below ``n_vocab``), control
        tokens as their text."""
        return self.prompts.detokenize([int(t) for t in tokens])

    def token_piece(self, token: int) -> bytes:
        """The bytes ``token`` adds to the text (possibly part of a UTF-8 character)."""
        return self.target.token_piece(int(token))

    # ------------------------------------------------------------------ constraints (``engine.grammars``)

    def compile_constraint(self, *, json_schema=None, grammar: str | None = None) -> Constraint:
        """``Grammars.compile``: a constraint from a JSON schema or a grammar, compiled
        against the target's vocabulary (cached: compile once, use for many requests)."""
        return self.grammars.compile(json_schema=json_schema, grammar=grammar)

    def check_constraint(self, json_schema) -> None:
        """``Grammars.check``: ``GrammarError`` unless ``json_schema`` compiles and starts."""
        self.grammars.check(json_schema)

    def tool_format(self):
        """How this model writes tool calls (``ChatFormats.tool_format``: the format read from
        the chat template, or the one named at load; found once)."""
        return self.chat_formats.tool_format()

    def reasoning_format(self):
        """The target's thinking markers (``ChatFormats.reasoning_format``, read from its
        vocabulary and chat template; found once), None for a model that does not think in a
        marked block."""
        return self.chat_formats.reasoning_format()

    def grammar_tokenizer(self):
        return self.grammars.tokenizer()

    # ------------------------------------------------------------------ generation

    def _generation(self, prompt, sampling_params, draft_params, constraint, json_schema, grammar,
                    logprobs: int | None) -> Generation:
        given = [x is not None for x in (constraint, json_schema, grammar)]
        if sum(given) > 1:
            raise TypeError("give at most one of constraint, json_schema and grammar")
        if json_schema is not None or grammar is not None:
            constraint = self.compile_constraint(json_schema=json_schema, grammar=grammar)
        if logprobs is not None and not (isinstance(logprobs, int) and 0 <= logprobs <= self.n_vocab):
            raise UserError(f"logprobs must be None or a number of alternatives from 0 to {self.n_vocab}, "
                            f"got {logprobs!r}")
        sp = sampling_params or SamplingParams()
        dp = draft_params or DraftParams()
        self.check_draft_params(dp)
        if self.standby is not None and self.standby.wanted(dp, sp.seed is not None):  # a closed draft it needs
            self.draft = self.standby.open()
        if getattr(self.target, "max_chain", None) == 0:  # recurrent memory that cannot undo a token
            dp = dp.replace(method="none")
        if sp.logit_bias and sp.logit_bias[-1][0] >= self.n_vocab:  # sorted by id
            raise ConfigError("logit_bias", f"logit_bias names token {sp.logit_bias[-1][0]}, outside the vocabulary "
                                            f"(0..{self.n_vocab - 1})")
        if isinstance(prompt, str):
            tokens = self.text_tokens(prompt)
        else:
            tokens = [int(t) for t in prompt]
            bad = [t for t in tokens if not 0 <= t < self.n_vocab]
            if bad:
                raise UserError(f"prompt token {bad[0]} is outside the vocabulary (0..{self.n_vocab - 1})")
        if not tokens:
            raise UserError("the prompt is empty")
        state = constraint.start() if constraint is not None else None  # refuses an impossible start
        seed = int(sp.seed) if sp.seed is not None else int(np.random.SeedSequence().entropy % (2**63))
        # a repeated seed alone would tie this request's uniforms to state an earlier one shaped
        key = self.seed_key(seed, dp) if sp.seed is not None else None
        auto = autorequest.Auto(self._tuner(dp, len(tokens)), seed, key) if dp.method == "auto" else None
        learnt = self.memory.learnt() if auto is not None and dp.use_memory and self.memory is not None else None
        if learnt is not None:  # how well the context's and the memory's candidates did in earlier requests
            auto.tuner.calibration.carry_lookup(learnt)
        # the request's candidate sources are built by the generation through their registry
        # (``decoding.candidates``); the memory, a store spanning requests, is the engine's
        gen = Generation(tokens, sp, dp, vocab=self.target, has_draft=self.draft is not None, seed=seed,
                         auto=auto, constraint=state, logprobs=logprobs, memory=self.memory, key=key,
                         text=self._text_codec(), text_draft=self.text_draft)
        if auto is not None:  # its steps' predicted and measured times, in the reply's stats (bench shows them)
            gen.stats.step_times = auto.tuner.timing
        return gen

    def _finished(self, gen: Generation) -> None:
        """A request of the one slot ended: the standby may close the draft (``decoding.standby``)."""
        s = self.standby
        if s is not None and s.finished(gen.stats.method, gen.stats.draft_calls, gen.sp.seed is not None):
            self.draft = s.close(self.draft)

    def _text_codec(self):
        """The tokenizer sources that read the prompt's text use (the engine's own), None for a
        backend without one (the test fakes)."""
        return self if hasattr(self.target, "tokenize") else None

    def prompt_views(self, tokens: list[int]) -> list[list[int]]:
        """The prompt's text as replies quote it (``decoding.candidates.views``), each
        tokenized with the target's tokenizer as plain text; none for a backend without a
        tokenizer (the test fakes).  A function of the prompt alone, so its candidates keep
        the law exact."""
        return views.prompt_views(self._text_codec(), tokens)

    @property
    def ledger(self) -> Ledger:
        """The keys of seeded requests that read state other requests shaped
        (``decoding.seeding``): the memory's own ledger, saved with its file, or the engine's."""
        return self.memory.ledger if self.memory is not None else self._ledger

    def start_afresh(self) -> None:
        """Forget the state that spans requests, the memory's answers and learnt bins, and with
        it the seed ledger: seeds then draw as on a freshly started engine (a benchmark that
        replays its seeds does the same work each time).  Only while no request runs."""
        if self.memory is not None:
            self.memory.clear()
            self.memory.ledger = Ledger()
        self._ledger = Ledger()

    def seed_key(self, seed: int, dp: DraftParams) -> tuple[int, ...] | None:
        """The ledger key a request seeded ``seed`` under ``dp`` draws under (``decoding.seeding``;
        None: the seed alone), its use counted when it takes part in state that spans
        requests.  It reads such state under ``auto`` or ``lookup`` with ``use_memory`` (the
        memory's answers; ``auto`` also its learnt bins), under ``auto`` while ``correct_costs``
        (the curves earlier requests' steps corrected) and, with more than one slot, always
        (the requests of its pass decide its rows and tree room); with ``use_memory`` its
        answer joins the memory.  One that only adds to the memory, alone in its slot, keeps
        its seed alone: nothing it reads was shaped by anyone, and the use counted keys every
        later reader of that seed apart from it."""
        fills = self.memory is not None and dp.use_memory
        reads = (self.n_slots > 1 or (dp.method == "auto" and self.costs.correct)
                 or (fills and uses_lookup(dp)))
        if not (reads or fills):
            return None
        key = self.ledger.key(seed)
        return key if reads else None

    def generation(self, prompt, sampling: SamplingParams | None = None, draft: DraftParams | None = None, *,
                   constraint: Constraint | None = None, json_schema=None, grammar: str | None = None,
                   logprobs: int | None = None) -> Generation:
        """One request, checked and ready to run, not started (``stream``'s arguments): for
        ``batch`` or a loop of one's own."""
        return self._generation(prompt, sampling, draft, constraint, json_schema, grammar, logprobs)

    def batch(self, chunk: int = batching.DEFAULT_CHUNK) -> batching.Batch:
        """A ``decoding.batch.Batch`` over this engine's models, whose slots (``n_slots``) hold
        that many requests stepped together; ``auto`` requests share each step's rows by the
        cost curves; a prompt evicted from a slot is kept in the engine's RAM prompt cache
        (``prompt_cache``), if any.  Driven by whoever calls its ``step``."""
        return batching.Batch(self.target, self.draft, chunk=chunk, tables=self.costs.tables(),
                              row_s=self._auto_row_seconds(), ram=self.prompt_cache)

    def submit(self, prompt, sampling: SamplingParams | None = None, draft: DraftParams | None = None, *,
               constraint: Constraint | None = None, json_schema=None, grammar: str | None = None,
               logprobs: int | None = None, cancel=None) -> Ticket:
        """Start a request beside the others (``stream``'s arguments; bad arguments raise
        here): it waits for a free slot, then runs in the same steps as every other request
        in a slot.  Iterate the ``Ticket`` for its text, ``close()`` it to withdraw it,
        ``result()`` for its ``Result``.  Any thread may submit; one thread of the engine's
        own makes every model call.  ``stream`` and ``generate`` go through here when the
        engine has more than one slot.  ``cancel``: an event (``is_set()``) that withdraws
        the request as ``close()`` does, from any thread."""
        gen = self._generation(prompt, sampling, draft, constraint, json_schema, grammar, logprobs)
        return self._submit(gen, cancel)

    def _submit(self, gen: Generation, cancel=None) -> Ticket:
        with self._runner_lock:
            if self._runner is None:
                self._runner = Runner(self.batch())
            elif self.costs.check is not None:  # the curves as corrected since, for sharing rows
                self._runner.batch.tables = self.costs.tables()
        return self._runner.submit(gen, cancel)

    def _shared(self, gen: Generation, cancel=None) -> Iterator[tuple[str, int]]:
        """``gen``'s pieces with their logprob counts through the runner (withdrawn when the
        iterator is closed, or ``cancel`` is set)."""
        ticket = self._submit(gen, cancel)
        try:
            yield from ticket.marked()
        finally:
            ticket.close()
            ticket.result()

    def stream(self, prompt, sampling: SamplingParams | None = None, draft: DraftParams | None = None, *,
               constraint: Constraint | None = None, json_schema=None, grammar: str | None = None,
               logprobs: int | None = None, cancel=None) -> Iterator[str]:
        """Yield text pieces as soon as they are complete UTF-8 (and past any stop string).
        When the iterator ends, ``engine.last_result`` holds the full ``Result``; closed or
        interrupted early (Ctrl-C, an error), its ``finish_reason`` is "interrupted".
        ``cancel``: an event (``is_set()``, e.g. a ``threading.Event``) that another thread
        may set to end the reply before its next step (its slot is then free), even while
        the iterator waits for text that has not come.

        ``json_schema`` / ``grammar`` (see ``compile_constraint``) or an already compiled
        ``constraint`` restrict the output: every token is drawn exactly as plain constrained
        sampling would draw it (the mask first, then temperature, top-k, top-p, min-p), with
        speculation on.  When the constraint is complete and only an end token may follow,
        the reply ends with finish_reason "eos"; ``max_tokens`` first gives "length" and the
        partial text.  ``logprobs``: see ``generate``."""
        gen = self._generation(prompt, sampling, draft, constraint, json_schema, grammar, logprobs)
        self.last_result = None
        try:
            if self.n_slots == 1:
                yield from loop.run(gen, self.target, self.draft, cancel, self.prompt_cache)
            else:
                with contextlib.closing(self._shared(gen, cancel)) as shared:
                    for piece, _ in shared:
                        yield piece
        finally:
            self.last_result = gen.result()
            self._finished(gen)

    def stream_logprobs(self, prompt, sampling: SamplingParams | None = None, draft: DraftParams | None = None,
                        logprobs: int = 0, *, constraint: Constraint | None = None, json_schema=None,
                        grammar: str | None = None, cancel=None) -> Iterator[tuple[str, list[TokenLogprob]]]:
        """``stream`` with logprobs: yields ``(piece, entries)``, ``entries`` the
        ``TokenLogprob`` of the tokens emitted since the previous piece (text and tokens do not
        align one to one: a token may hold part of a character, or text a stop string may
        still swallow).  The yielded lists, concatenated, are a prefix of
        ``last_result.logprobs``; what follows it (tokens whose text never became final, such
        as a stop string's) is only there.  The constraint arguments and ``cancel`` are
        ``stream``'s."""
        gen = self._generation(prompt, sampling, draft, constraint, json_schema, grammar, logprobs)
        self.last_result = None
        sent = 0
        try:
            if self.n_slots == 1:
                pieces = ((piece, len(gen.logprobs))
                          for piece in loop.run(gen, self.target, self.draft, cancel, self.prompt_cache))
            else:
                pieces = self._shared(gen, cancel)
            with contextlib.closing(pieces):
                for piece, n in pieces:
                    yield piece, gen.logprobs[sent:n]
                    sent = n
        finally:
            self.last_result = gen.result()
            self._finished(gen)

    def generate(self, prompt, sampling: SamplingParams | None = None, draft: DraftParams | None = None, *,
                 constraint: Constraint | None = None, json_schema=None, grammar: str | None = None,
                 logprobs: int | None = None) -> Result:
        """Generate a completion of ``prompt`` (a string or a list of token ids); the
        constraint arguments are ``stream``'s.

        ``logprobs``: None (the default) computes nothing; an integer n >= 0 fills
        ``Result.logprobs`` with each token's ``TokenLogprob`` and its n most likely
        alternatives, read from the target rows the step already has (no extra model call;
        one pass over the row per token).  They are the model's own, before the constraint's
        mask as before the sampling filters."""
        for _ in self.stream(prompt, sampling, draft, constraint=constraint, json_schema=json_schema,
                             grammar=grammar, logprobs=logprobs):
            pass
        assert self.last_result is not None
        return self.last_result
