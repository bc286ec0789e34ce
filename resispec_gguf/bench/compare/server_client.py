"""llama.cpp's ``llama-server`` as a system under test, for ``bench --against llama.cpp``.

Starts the server on a free local port, waits for ``/health``, sends ``/completion``
requests (the prompt as token ids, so llama.cpp decodes exactly the tokens our engine does)
or ``/v1/chat/completions`` requests (a tool loop's, rendered by llama.cpp's own template)
and always stops the process again.  Also runs a concurrency level against it the way
``bench --concurrency`` runs one against our engine: c client threads share the prompts
(client i takes prompts i, i + c, ...) and send them back to back, streamed, so that the time
to first token is seen by the client.

The standard library, ``errors`` and ``concurrency``'s client threads: the parsers are pure
and tested without a binary.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from ...errors import UserError
from ..concurrency import level_figures, shared_clients

SERVER_BIN = "llama-server"
# llama.cpp's default sampler chain minus the stages that are off at their defaults
# (penalties, DRY, top-n-sigma, typical-p, XTC): the filters our engine applies, in its order
SAMPLERS = ["top_k", "top_p", "min_p", "temperature"]


class ServerError(UserError):
    """A one-line problem with the server (the command line exits with code 2)."""


# --------------------------------------------------------------------------- pure helpers


def chat_body(item: dict, *, n, temp, top_k, top_p, min_p, seed) -> dict:
    """The ``/v1/chat/completions`` request for a chat item (``messages`` with its ``tools``,
    ``tool_choice`` and ``response_format``): ``n`` tokens at most, our sampling settings."""
    body = {"messages": item["messages"], "max_tokens": int(n), "temperature": float(temp), "top_k": int(top_k),
            "top_p": float(top_p), "min_p": float(min_p), "seed": int(seed), "samplers": SAMPLERS,
            "stream": False, "cache_prompt": True}
    return body | {k: item[k] for k in ("tools", "tool_choice", "response_format") if item.get(k) is not None}


def completion_body(tokens, *, n, temp, top_k, top_p, min_p, seed, stream=False) -> dict:
    """The ``/completion`` request for prompt token ids ``tokens``: ``n`` tokens at most, our
    sampling settings, the same seed rule as ours (the caller passes seed + prompt index)."""
    return {"prompt": [int(t) for t in tokens], "n_predict": int(n), "temperature": float(temp),
            "top_k": int(top_k), "top_p": float(top_p), "min_p": float(min_p), "seed": int(seed),
            "samplers": SAMPLERS, "stream": bool(stream), "cache_prompt": True}


def parse_completion(reply: dict) -> dict:
    """From a final ``/completion`` reply (or the last streamed event): ``tokens_per_s``
    (``timings.predicted_per_second``: decode speed, prompt processing excluded), ``tokens``,
    ``prompt_tokens`` (processed + cached: the depth the decode ran at), ``prompt_cached``,
    ``prompt_s`` and ``decode_s`` (its prompt processing and decode times), and ``drafted`` /
    ``accepted`` (0 without a draft).  A ``/v1/chat/completions`` reply carries the same
    ``timings``.  Raises ``ValueError`` when the timings are missing."""
    t = reply.get("timings") if isinstance(reply, dict) else None
    if not isinstance(t, dict) or "predicted_per_second" not in t or "predicted_n" not in t:
        raise ValueError("the reply has no timings.predicted_per_second")
    return {
        "tokens_per_s": float(t["predicted_per_second"]),
        "tokens": int(t["predicted_n"]),
        "prompt_tokens": int(t.get("prompt_n", 0)) + int(t.get("cache_n", 0)),
        "prompt_cached": int(t.get("cache_n", 0)),
        "prompt_s": float(t.get("prompt_ms", 0.0)) / 1000.0,
        "decode_s": float(t.get("predicted_ms", 0.0)) / 1000.0,
        "drafted": int(t.get("draft_n", 0)),
        "accepted": int(t.get("draft_n_accepted", 0)),
    }


def parse_sse_line(line: str):
    """One line of a streamed reply: the event's JSON object, or None for blank lines,
    comments and other fields.  Raises ``ValueError`` on an error event or bad JSON."""
    line = line.strip()
    if not line.startswith("data:"):
        if line.startswith("error:"):
            raise ValueError(_error_message(line[len("error:"):]))
        return None
    data = line[len("data:"):].strip()
    if data == "[DONE]":
        return None
    try:
        event = json.loads(data)
    except json.JSONDecodeError as e:
        raise ValueError(f"bad event in the stream ({e.msg})") from None
    if isinstance(event, dict) and "error" in event:
        raise ValueError(_error_message(data))
    return event


def _error_message(body: str) -> str:
    try:
        err = json.loads(body)
        err = err.get("error", err)
        msg = err.get("message") if isinstance(err, dict) else str(err)
    except (json.JSONDecodeError, AttributeError):
        msg = body
    return " ".join(str(msg or body).split())[:200]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- the process


class LlamaServer:
    """A running ``llama-server`` (``with LlamaServer(cmd) as s``): started on a free port,
    ready once ``/health`` answers 200, stopped on exit from the block, error or not.
    ``cmd`` is the command without ``--host``/``--port``."""

    def __init__(self, cmd: list[str], *, name: str = SERVER_BIN, start_timeout: float = 300,
                 request_timeout: float = 900):
        self.cmd, self.name = list(cmd), name
        self.start_timeout, self.request_timeout = start_timeout, request_timeout
        self.port = None
        self._proc = None
        self._log = None

    def __enter__(self) -> "LlamaServer":
        self.port = free_port()
        self._log = tempfile.NamedTemporaryFile("w+", prefix="llama-server-", suffix=".log", delete=False)
        try:
            self._proc = subprocess.Popen(self.cmd + ["--host", "127.0.0.1", "--port", str(self.port)],
                                          stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT)
        except OSError as e:
            self._cleanup()
            raise ServerError(f"cannot run {self.cmd[0]}: {e.strerror}") from None
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._cleanup()

    def _cleanup(self) -> None:
        if self._log is not None:
            self._log.close()
            try:
                os.unlink(self._log.name)
            except OSError:
                pass
            self._log = None

    def last_log_line(self) -> str:
        try:
            lines = [ln.strip() for ln in Path(self._log.name).read_text(errors="replace").splitlines() if ln.strip()]
        except (OSError, AttributeError):
            return "(no log)"
        last = lines[-1] if lines else "(no output)"
        return last if len(last) <= 200 else last[:197] + "..."

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            code = self._proc.poll()
            if code is not None:
                raise ServerError(f"{self.name} exited (code {code}) before it was ready: {self.last_log_line()}")
            try:
                status, _ = self._request("GET", "/health", None, timeout=5)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.25)
        raise ServerError(f"{self.name} was not ready within {self.start_timeout:.0f} s: {self.last_log_line()}")

    def _request(self, method, path, body, timeout):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read().decode("utf-8", "replace")
        finally:
            conn.close()

    def complete(self, body: dict) -> dict:
        """One non-streamed ``/completion``: ``parse_completion`` of its reply."""
        try:
            status, text = self._request("POST", "/completion", dict(body, stream=False), self.request_timeout)
        except OSError as e:
            raise ServerError(f"{self.name}: request failed ({e}); {self.last_log_line()}") from None
        if status != 200:
            raise ServerError(f"{self.name}: HTTP {status}: {_error_message(text)}")
        try:
            return parse_completion(json.loads(text))
        except (ValueError, json.JSONDecodeError) as e:
            raise ServerError(f"{self.name}: {e}") from None

    def chat(self, body: dict) -> dict:
        """One non-streamed ``/v1/chat/completions``: ``parse_completion`` of its reply, with
        ``e2e`` (seconds, as the client sees them), the ``finish_reason``, the ``content`` and
        the ``tool_calls`` parsed (``{name, arguments}`` each)."""
        t0 = time.perf_counter()
        try:
            status, text = self._request("POST", "/v1/chat/completions", dict(body, stream=False),
                                         self.request_timeout)
        except OSError as e:
            raise ServerError(f"{self.name}: request failed ({e}); {self.last_log_line()}") from None
        e2e = time.perf_counter() - t0
        if status != 200:
            raise ServerError(f"{self.name}: HTTP {status}: {_error_message(text)}")
        try:
            reply = json.loads(text)
            choice = reply["choices"][0]
            message = choice.get("message") or {}
            calls = [c["function"] for c in message.get("tool_calls") or []]
            return {**parse_completion(reply), "e2e": e2e, "finish_reason": choice.get("finish_reason"),
                    "content": message.get("content"), "tool_calls": calls}
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise ServerError(f"{self.name}: not a chat completion ({e})") from None

    def stream(self, body: dict) -> dict:
        """One streamed ``/completion``: ``parse_completion`` of its last event, with ``ttft``
        (seconds to the first event carrying a token) and ``e2e`` (to the end) as the client
        sees them."""
        t0 = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.request_timeout)
        try:
            conn.request("POST", "/completion", body=json.dumps(dict(body, stream=True)),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise ServerError(f"{self.name}: HTTP {resp.status}: {_error_message(resp.read().decode('utf-8', 'replace'))}")
            first, last = None, None
            for raw in resp:
                event = parse_sse_line(raw.decode("utf-8", "replace"))
                if event is None:
                    continue
                if first is None and event.get("tokens"):
                    first = time.perf_counter() - t0
                last = event
                if event.get("stop"):
                    break
            end = time.perf_counter() - t0
        except OSError as e:
            raise ServerError(f"{self.name}: request failed ({e}); {self.last_log_line()}") from None
        except ValueError as e:
            raise ServerError(f"{self.name}: {e}") from None
        finally:
            conn.close()
        if last is None:
            raise ServerError(f"{self.name}: the stream ended without an event")
        try:
            out = parse_completion(last)
        except ValueError as e:
            raise ServerError(f"{self.name}: {e}") from None
        return {**out, "ttft": first if first is not None else end, "e2e": end}


def run_level(server: LlamaServer, bodies: list[dict], clients: int) -> dict:
    """``clients`` threads sharing the requests ``bodies`` (client i sends i, i + c, ... back to
    back, streamed); ``level_figures`` of the lot, plus the draft's ``drafted``/``accepted``."""
    records, wall = shared_clients(bodies, clients, server.stream)
    return {**level_figures(records, wall, clients),
            "drafted": sum(r["drafted"] for r in records), "accepted": sum(r["accepted"] for r in records)}
