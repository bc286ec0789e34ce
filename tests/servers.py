"""Helpers of the server tests (test_server.py, test_server_queue.py, test_server_assist.py,
test_tools_server.py): real uvicorn servers on loopback ports, engines, a slow fake generator,
and checks of error bodies and of a server's health after a probe; and a fake llama.cpp
(``FAKE_LLAMA_CPP``, ``write_fake_llama_cpp``) for ``bench --against`` (test_cli_e2e.py,
test_compare.py)."""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time
from pathlib import Path

from resispec_gguf.engine import Engine, Result, Stats

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me a story."}]
# every route that takes a body
POST_ROUTES = ["/v1/chat/completions", "/v1/completions", "/infill", "/v1/messages", "/v1/messages/count_tokens",
               "/v1/responses", "/tokenize", "/detokenize", "/apply-template"]


@contextlib.contextmanager
def serving(app):
    import uvicorn  # imported here: the fake llama.cpp's users need no server stack

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # else ~40 ms per keep-alive request
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def load(pair) -> Engine:
    target, draft = pair
    # one thread: on a busy machine llama.cpp's threads wait for each other for ages (a 4-token
    # reply took 1.6 s with two threads beside two other busy processes, 2 ms with one)
    # no memory of past answers: the server tests compare seeded replies made one after another
    return Engine.load(str(target), str(draft), n_ctx=512, n_threads=1, progress=False, memory_size=0)


class SlowEngine:
    """A real engine's tokenizer and chat template around a fake, slow generator (anything
    not defined here is the real engine's)."""

    def __init__(self, real: Engine, delay: float = 0.01):
        self.real = real
        self.delay = delay
        self.last_result = None
        self.closed_early = threading.Event()
        self.active = 0
        self.max_active = 0
        self.fail = False
        self.tokenized = 0  # prompts tokenized (chat or text)
        self.tokenize_delay = {}  # prompt text -> seconds its tokenization takes
        self.quiet = False  # after its first piece, steps that make no text until cancelled
        self.cancel_seen = threading.Event()  # a quiet stream saw its cancel event

    def __getattr__(self, name):
        return getattr(self.real, name)

    def chat_tokens(self, messages):
        self.tokenized += 1
        return self.real.chat_tokens(messages)

    def text_tokens(self, text):
        self.tokenized += 1
        time.sleep(self.tokenize_delay.get(text, 0))
        return self.real.text_tokens(text)

    def stream(self, prompt, sampling=None, draft=None, constraint=None, cancel=None):
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        n, reason = 0, "stop"
        try:
            if self.fail:
                self.fail = False
                raise RuntimeError("boom")
            for _ in range(sampling.max_tokens):
                time.sleep(self.delay)
                n += 1
                if self.quiet and n > 1:  # a step with no text: only the cancel event can end it
                    if cancel is not None and cancel.is_set():
                        self.cancel_seen.set()
                        return
                    continue
                yield "x"
            reason = "length"
        except GeneratorExit:
            self.closed_early.set()
            raise
        finally:
            self.active -= 1
            stats = Stats(method=draft.method, prompt_tokens=len(prompt), tokens=n)
            self.last_result = Result(tokens=[5] * n, text="x" * n, finish_reason=reason, stats=stats, seed=0)


def stream_text(stream):
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks


def api_error(r, status, param=None):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    if status < 500:
        assert err["type"] == "invalid_request_error"
    if param is not None:
        assert err["param"] == param, err
    return err


def anthropic_error(r, status, param=None):
    """Anthropic's error shape: ``{"type": "error", "error": {"type", "message"}}`` (and the
    field it names, as ``param``)."""
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error" and set(body) == {"type", "error"}, body
    err = body["error"]
    assert set(err) <= {"type", "message", "param"} and isinstance(err["message"], str) and err["message"]
    if param is not None:
        assert err.get("param") == param, err
    return err


def wait_for(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def read_until_content(lines):
    """Consume SSE lines up to the first content chunk; keep ``lines`` referenced to keep the
    stream open (a garbage-collected line iterator closes httpx's connection)."""
    for line in lines:
        if line.startswith("data: ") and '"content":"x"' in line:
            return line
    raise AssertionError("the stream ended without content")


_REFERENCE = {}


def still_healthy(url):
    """A greedy plain-decoding completion: its text must match the first one this URL gave."""
    import httpx

    body = {"prompt": "Once upon", "max_tokens": 4, "temperature": 0, "method": "none"}
    t = time.monotonic()
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=10)
    assert time.monotonic() - t < 2, "the server is slow to answer after the probe"
    assert r.status_code == 200, r.text
    text = r.json()["choices"][0]["text"]
    assert text == _REFERENCE.setdefault(url, text)
    return text


# llama.cpp's three binaries as one fake: --help and --version as build 0c1e570 prints what the
# comparison reads; else a llama-server on --port answering /health, /completion (streamed or
# not) and /v1/chat/completions (logging the seed, max_tokens and last message of each chat
# request to --log, where given)
FAKE_LLAMA_CPP = r'''
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = sys.argv[1:]
if "--help" in args or "--version" in args:
    print("-m,    --model FNAME     model path to load (fake llama.cpp)\n"
          "--spec-draft-n-max N     number of tokens to draft (default: 3)\n"
          "--spec-type none,draft-simple,ngram-mod\n"
          "--spec-draft-backend-sampling, --no-spec-draft-backend-sampling\n"
          "-kvu,  --kv-unified, -no-kvu, --no-kv-unified\n"
          "-d, --n-depth <n>        (default: 0)\n"
          "version: 0.0.0-fake (build 1, commit fake)")
    sys.exit(0)
port = int(args[args.index("--port") + 1])
log = args[args.index("--log") + 1] if "--log" in args else None


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _send(self, obj, kind="application/json"):
        data = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send({"status": "ok"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/v1/chat/completions":
            return self._chat(body)
        n = body["n_predict"]
        timings = {"cache_n": 0, "prompt_n": len(body["prompt"]), "prompt_ms": 10.0, "predicted_n": n,
                   "predicted_ms": 100.0, "predicted_per_second": n / 0.1, "draft_n": n, "draft_n_accepted": n}
        if not body.get("stream"):
            return self._send({"content": "x" * n, "stop": True, "timings": timings})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i in range(n):
            self.wfile.write(b"data: " + json.dumps({"content": "x", "tokens": [i], "stop": False}).encode() + b"\n\n")
        self.wfile.write(b"data: " + json.dumps({"content": "", "tokens": [], "stop": True,
                                                "timings": timings}).encode() + b"\n\n")
        self.wfile.flush()
        self.close_connection = True

    def _chat(self, body):
        if log:
            with open(log, "a") as f:
                f.write(json.dumps([body["seed"], body["max_tokens"], body["messages"][-1]["content"]]) + "\n")
        n = body["max_tokens"]
        self._send({"choices": [{"finish_reason": "length", "message": {"content": "x"}}],
                    "timings": {"cache_n": 0, "prompt_n": 7, "prompt_ms": 100.0, "predicted_n": n,
                                "predicted_ms": 200.0, "predicted_per_second": n / 0.2}})


ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''


def write_fake_llama_cpp(path: Path) -> Path:
    """``FAKE_LLAMA_CPP`` at ``path``, executable, run by this Python."""
    path.write_text(f"#!{sys.executable}\n{FAKE_LLAMA_CPP}")
    path.chmod(0o755)
    return path
