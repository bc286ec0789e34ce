"""The engine's job threads: jobs, their queue and their cancellation.

Up to ``slots`` jobs run at once (the engine's slots, ``--parallel``), each on a worker
thread of its own, in the order their prompts are ready; more wait in the queue.  With one
slot that is one request at a time on one thread (the engine is not thread-safe then); with
more, the engine steps the running requests together on its own thread (``Engine.submit``),
and a job thread only relays its request's pieces.  Rendering and tokenizing a prompt
(``prepare``, which only reads the vocabulary) happen before, on the app's pool of tokenizer
threads.  A request is *admitted* (counted against the queue's limit) when it arrives,
*queued* once its prompt is ready, and leaves with ``Worker.withdraw`` as soon as its client
is gone; a running job's generation sees the cancellation before its next step (whether or
not that request is making text), and its slot is free from then on.  A running job holds a
*lane* (0 to ``slots`` - 1, what ``/slots`` reports); a finished generation's ``Stats`` go to
the job's ``record`` (the server's metrics).

May import ``assist`` (planning), ``errors``, the chunks surface (the engine's stream for a
plan) and ``server.fields``; never the app, ``llama`` or the engine's models.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import threading
import time

from ...assist.plan import ChatPlan, plan_chat
from ...errors import ConstraintError, ConstraintFault, ContextFullError, UserError
from ..chunks import pieces
from .fields import Infill, Request

__all__ = ["Job", "Worker", "prepare"]

log = logging.getLogger("resispec_gguf.surfaces.server")


def prepare(engine, req: Request) -> ChatPlan:
    """Render and tokenize a request's prompt and compile its constraint (on a tokenizer
    thread: this only reads the vocabulary, so it may run while the engine thread decodes)."""
    if isinstance(req.prompt, Infill):
        p = req.prompt
        # /infill cuts a long file to fit (llama.cpp's way); a completion's prompt and suffix
        # are the user's text, refused as a prompt without a suffix would be
        completion = req.kind == "completion"
        reserve = 1 if completion else min(req.sampling.max_tokens, int(engine.n_ctx) // 2)
        tokens, p.truncated = engine.infill_tokens(p.prefix, p.suffix, middle=p.middle, extra=p.extra,
                                                   repo_level=p.repo_level, reserve=reserve)
        if completion and p.truncated:
            raise ContextFullError(f"the prompt and suffix do not fit the context ({int(engine.n_ctx)} tokens)")
        return ChatPlan(tokens)
    if req.kind == "chat":
        try:
            return plan_chat(engine, req.prompt, checked=req.options)
        except UserError:
            raise
        except Exception as exc:  # a template tripping over the request's data is bad input
            raise UserError(f"the chat template failed on these messages ({type(exc).__name__})") from None
    if isinstance(req.prompt, str):
        return ChatPlan(engine.text_tokens(req.prompt))
    return ChatPlan(list(req.prompt))


class Job:
    """One request's generation, run on the engine thread; events go back to the event loop.

    ``plan`` (``prepare``'s) is set before the job is queued.  Events: ("piece", piece) when
    streaming, then exactly one of ("done", Result), ("user_error", UserError),
    ("error", Exception) or ("cancelled", None | Result).
    """

    _serial = itertools.count()

    def __init__(self, engine, req: Request, loop: asyncio.AbstractEventLoop, record=None):
        self.engine = engine
        self.req = req
        self.loop = loop
        self.record = record  # called with the Stats of every generation that ran (``metrics``)
        self.id = next(Job._serial)
        self.plan: ChatPlan | None = None
        self.events: asyncio.Queue = asyncio.Queue()
        self.lane: int | None = None  # the worker's slot it runs in (``Worker.running``)
        self.started: float | None = None  # time.monotonic() when it started running
        self._cancel = threading.Event()

    def cancel(self) -> None:
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def _put(self, kind: str, value) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))
        except RuntimeError:  # the loop is closed: nobody is listening any more
            self._cancel.set()

    def run(self) -> None:
        if self.cancelled:
            self._put("cancelled", None)
            return
        req = self.req
        sent = False
        try:
            # the engine sees the cancellation before its next step, text or none
            stream = pieces(self.engine, self.plan, req.sampling, req.draft, req.logprobs, self._cancel)
            try:
                for piece in stream:
                    if req.stream:
                        self._put("piece", piece)
                        sent = True
                    if self.cancelled:
                        break
            finally:
                stream.close()
            result = self.engine.last_result
            if result is not None and self.record is not None:
                self.record(result.stats)
            if result is not None and result.finish_reason == "error" and result.fault:
                log.error("request %s: the constraint failed by our fault: %s", self.id, result.error)
            if result is not None and result.finish_reason == "error" and not sent:
                if result.fault:  # ours: a 500, the details in the log
                    self._put("error", ConstraintFault(result.error))
                else:  # nothing went out: a 400
                    self._put("user_error", ConstraintError(result.error))
                return
            self._put("cancelled" if self.cancelled else "done", result)
        except UserError as exc:
            self._put("user_error", exc)
        except Exception as exc:
            log.exception("generation failed")
            self._put("error", exc)


class Worker:
    """Up to ``slots`` threads that call the engine, with a FIFO of queued jobs (see the
    module docstring)."""

    def __init__(self, slots: int = 1):
        self.slots = int(slots)
        self._cv = threading.Condition()
        self._admitted: set[Job] = set()  # admitted, prompt not ready yet
        self._jobs: collections.deque[Job] = collections.deque()
        self._current: set[Job] = set()  # running
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for a job
        self._closing = False

    @property
    def inflight(self) -> int:
        """Admitted requests not finished yet (the running ones plus the waiting ones)."""
        with self._cv:
            return len(self._admitted) + len(self._jobs) + len(self._current)

    def load(self) -> dict:
        """``{"busy", "idle", "waiting"}``: slots running a request, free slots, requests
        admitted and waiting for one."""
        with self._cv:
            busy = len(self._current)
            return {"busy": busy, "idle": self.slots - busy, "waiting": len(self._admitted) + len(self._jobs)}

    def running(self) -> list[Job]:
        """The running jobs, by lane (each holds one of the ``slots``)."""
        with self._cv:
            return sorted(self._current, key=lambda j: j.lane)

    def admit(self, job: Job, limit: int) -> bool:
        """Count ``job`` in unless ``limit`` requests are already in flight."""
        with self._cv:
            if len(self._admitted) + len(self._jobs) + len(self._current) >= limit:
                return False
            self._admitted.add(job)
            return True

    def enqueue(self, job: Job) -> bool:
        """Queue an admitted job whose prompt is ready; False if it was withdrawn meanwhile."""
        with self._cv:
            if job not in self._admitted:
                return False
            self._admitted.discard(job)
            self._closing = False
            self._jobs.append(job)
            if self._idle < len(self._jobs) and len(self._threads) < self.slots:
                thread = threading.Thread(target=self._loop, name="resispec-engine", daemon=True)
                self._threads.append(thread)
                thread.start()
            self._cv.notify()
            return True

    def withdraw(self, job: Job) -> None:
        """Cancel ``job``; if it is not running yet it leaves at once, freeing its place."""
        with self._cv:
            job.cancel()
            self._admitted.discard(job)
            with contextlib.suppress(ValueError):
                self._jobs.remove(job)

    def _loop(self) -> None:
        while True:
            with self._cv:
                self._idle += 1
                while not self._jobs and not self._closing:
                    self._cv.wait()
                self._idle -= 1
                if not self._jobs:
                    self._threads.remove(threading.current_thread())
                    return
                job = self._jobs.popleft()
                job.lane = min(set(range(self.slots)) - {j.lane for j in self._current})
                job.started = time.monotonic()
                self._current.add(job)
            try:
                job.run()
            except BaseException:  # pragma: no cover - run() catches everything it expects
                log.exception("engine worker job crashed")
            finally:
                with self._cv:
                    self._current.discard(job)

    def shutdown(self, timeout: float = 30.0) -> None:
        """Cancel every job and wait for the thread to leave the engine (so it can be closed)."""
        with self._cv:
            self._closing = True
            for job in list(self._admitted) + list(self._jobs) + list(self._current):
                job.cancel()
            self._admitted.clear()
            threads = list(self._threads)
            self._cv.notify_all()
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout)
