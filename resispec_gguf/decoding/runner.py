"""A ``batch.Batch`` driven on a thread of its own, so that several callers' requests share
its steps: ``submit`` a generation from any thread, read its text from the ``Ticket``.

One thread makes every model call.  Each turn of its loop it admits waiting requests into
free slots (first come, first served), ends the requests whose tickets were closed (a client
gone: its slot is free from the next step on), and makes one ``Batch.step``.  A request's
failure (a prompt that cannot fit, a constraint that fails) is its own: it ends that ticket
and no other.  An unexpected error in a step ends every request in flight with it.
"""

from __future__ import annotations

import collections
import queue
import threading

from .batch import Batch, Request
from .generation import Generation
from .stats import Result

__all__ = ["Runner", "Ticket"]

_END = object()


class Ticket:
    """One submitted request: iterate it for its text pieces (``(text, n_logprobs)`` with
    ``marked``: the number of ``gen.logprobs`` entries final when the piece was); ``close``
    withdraws it; ``result()`` waits for its ``Result``.  ``cancel``: an event (``is_set()``)
    that withdraws it too, seen before the next step even while its reader waits for text
    that does not come (a client gone while its request makes none)."""

    def __init__(self, gen: Generation, runner: "Runner", cancel=None):
        self.gen = gen
        self._runner = runner
        self._queue: queue.Queue = queue.Queue()
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._closed = False
        self._cancel = cancel
        self.slot: int | None = None

    @property
    def closed(self) -> bool:
        return self._closed or (self._cancel is not None and self._cancel.is_set())

    def marked(self):
        """The pieces with their logprob counts, as they come; raises what ended the request
        abnormally (a prompt that does not fit: ``ContextFullError``)."""
        while True:
            item = self._queue.get()
            if item is _END:
                if self._error is not None:
                    raise self._error
                return
            yield item

    def __iter__(self):
        for text, _ in self.marked():
            yield text

    def close(self) -> None:
        """Withdraw the request: it leaves its slot (or the queue) before the next step."""
        if not self._done.is_set():
            self._closed = True
            self._runner._wake()

    def result(self, timeout: float | None = None) -> Result:
        self._done.wait(timeout)
        return self.gen.result()

    def _push(self, items) -> None:
        for item in items:
            self._queue.put(item)

    def _finish(self, error: BaseException | None = None) -> None:
        self._error = error
        self._done.set()
        self._queue.put(_END)


class Runner:
    """The thread that steps a ``Batch`` (module docstring).  ``busy``/``idle``: slots."""

    def __init__(self, batch: Batch):
        self.batch = batch
        self._cv = threading.Condition()
        self._waiting: collections.deque[Ticket] = collections.deque()
        self._tickets: dict[Request, Ticket] = {}
        self._thread: threading.Thread | None = None
        self._stopping = False

    @property
    def busy(self) -> int:
        return self.batch.busy

    @property
    def idle(self) -> int:
        return self.batch.n_slots - self.batch.busy

    @property
    def waiting(self) -> int:
        with self._cv:
            return len(self._waiting)

    def submit(self, gen: Generation, cancel=None) -> Ticket:
        ticket = Ticket(gen, self, cancel)
        with self._cv:
            if self._stopping:
                raise RuntimeError("the runner is stopped")
            self._waiting.append(ticket)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="resispec-batch", daemon=True)
                self._thread.start()
            self._cv.notify()
        return ticket

    def stop(self, timeout: float = 30.0) -> None:
        """End every request (interrupted) and the thread."""
        with self._cv:
            self._stopping = True
            thread = self._thread
            self._cv.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _wake(self) -> None:
        with self._cv:
            self._cv.notify()

    def _loop(self) -> None:
        batch = self.batch
        while True:
            with self._cv:
                while not self._stopping and not self._waiting and not batch.busy:
                    self._cv.wait()
                if self._stopping:
                    self._end_all()
                    self._thread = None
                    return
                self._admit()
            for req, ticket in list(self._tickets.items()):
                if ticket.closed:
                    batch.cancel(req)
                    self._settle(req)
            if not batch.busy:
                continue
            try:
                changed = batch.step()
            except Exception as e:  # a model failure: every request in flight ends with it
                for req in batch.requests:
                    batch.cancel(req)
                    self._settle(req, e)
                continue
            for req in changed:
                self._settle(req)

    def _admit(self) -> None:
        """Waiting tickets into free slots, in order (under the lock)."""
        while self._waiting:
            ticket = self._waiting[0]
            if ticket.closed:
                self._waiting.popleft()
                ticket._finish()
                continue
            slot = self.batch.free_slot(ticket.gen.prompt)
            if slot is None:
                return
            self._waiting.popleft()
            try:
                req = self.batch.admit(ticket.gen, slot)
            except Exception as e:  # its prompt cannot fit a slot: its own error
                ticket._finish(e)
                continue
            ticket.slot = slot
            self._tickets[req] = ticket

    def _settle(self, req: Request, error: BaseException | None = None) -> None:
        ticket = self._tickets.get(req)
        if ticket is None:
            return
        ticket._push(req.take_marked())
        if req.done:
            del self._tickets[req]
            ticket._finish(error)

    def _end_all(self) -> None:
        for ticket in self._waiting:
            ticket._finish()
        self._waiting.clear()
        for req in list(self._tickets):
            self.batch.cancel(req)
            self._settle(req)
