"""bench/compare/server_client.py (bench --against's llama-server) without llama.cpp: its
parsers on replies captured from llama.cpp's llama-server (build 0c1e570, vendored by
llama-cpp-python 0.3.36), and the process handling (free port, /health, streamed requests,
concurrent clients, stop) against a small fake llama-server written by the test."""

from __future__ import annotations

import json
import stat
import sys

import pytest

from resispec_gguf.bench.compare import server_client as srv

# a non-streamed /completion reply of the real server, trimmed to the fields that matter
REPLY = {
    "index": 0, "content": "def fib(n):", "tokens": [], "id_slot": 0, "stop": True,
    "tokens_predicted": 8, "tokens_evaluated": 31, "stop_type": "limit", "tokens_cached": 38,
    "timings": {"cache_n": 0, "prompt_n": 31, "prompt_ms": 1843.2, "prompt_per_token_ms": 59.46,
                "prompt_per_second": 16.82, "predicted_n": 8, "predicted_ms": 503.9,
                "predicted_per_token_ms": 62.99, "predicted_per_second": 15.876},
}

# the end of a streamed reply with a draft model (server-sent events)
STREAM_TAIL = (
    'data: {"index":0,"content":" n","tokens":[308],"stop":false,"id_slot":0,"tokens_predicted":7,"tokens_evaluated":31}\n'
    "\n"
    'data: {"index":0,"content":"","tokens":[],"id_slot":0,"stop":true,"tokens_predicted":8,"tokens_evaluated":31,'
    '"timings":{"cache_n":30,"prompt_n":1,"prompt_ms":70.1,"predicted_n":8,"predicted_ms":400.0,'
    '"predicted_per_second":20.0,"draft_n":9,"draft_n_accepted":5}}\n'
)


def test_completion_body_sends_our_tokens_and_filters():
    body = srv.completion_body([1, 2, 3], n=48, temp=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=7, stream=True)
    assert body["prompt"] == [1, 2, 3] and body["n_predict"] == 48 and body["seed"] == 7 and body["stream"] is True
    assert (body["temperature"], body["top_k"], body["top_p"], body["min_p"]) == (0.8, 40, 0.95, 0.05)
    assert body["samplers"] == ["top_k", "top_p", "min_p", "temperature"]
    json.dumps(body)  # numpy ints would not serialise


def test_parse_completion():
    r = srv.parse_completion(REPLY)
    assert r == {"tokens_per_s": 15.876, "tokens": 8, "prompt_tokens": 31, "prompt_cached": 0, "drafted": 0,
                 "accepted": 0, "prompt_s": pytest.approx(1.8432), "decode_s": pytest.approx(0.5039)}


def test_chat_body_carries_the_item_s_tools_and_format():
    item = {"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}], "tool_choice": "none",
            "response_format": {"type": "json_object"}, "max_tokens": 99, "kind": "agent"}
    body = srv.chat_body(item, n=12, temp=0.0, top_k=40, top_p=0.95, min_p=0.05, seed=4)
    assert body["messages"] == item["messages"] and body["tools"] == item["tools"] and body["tool_choice"] == "none"
    assert body["response_format"] == {"type": "json_object"} and body["max_tokens"] == 12 and body["seed"] == 4
    assert "kind" not in body and body["samplers"] == srv.SAMPLERS and body["stream"] is False
    plain = srv.chat_body({"messages": item["messages"]}, n=3, temp=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0)
    assert "tools" not in plain and "response_format" not in plain


@pytest.mark.parametrize("reply", [{}, {"timings": {}}, {"timings": {"predicted_n": 3}}, [], None])
def test_parse_completion_without_timings(reply):
    with pytest.raises(ValueError, match="predicted_per_second"):
        srv.parse_completion(reply)


def test_parse_sse_lines():
    events = [srv.parse_sse_line(ln) for ln in STREAM_TAIL.splitlines()]
    assert events[1] is None and events[0]["tokens"] == [308]
    r = srv.parse_completion(events[2])
    assert r["prompt_tokens"] == 31 and (r["drafted"], r["accepted"]) == (9, 5) and r["tokens_per_s"] == 20.0
    assert srv.parse_sse_line(": keep-alive") is None and srv.parse_sse_line("data: [DONE]") is None


@pytest.mark.parametrize("line, message", [
    ('data: {"error":{"code":400,"message":"invalid prompt","type":"invalid_request_error"}}', "invalid prompt"),
    ('error: {"code":500,"message":"slot unavailable"}', "slot unavailable"),
    ("data: {not json", "bad event"),
])
def test_parse_sse_line_errors(line, message):
    with pytest.raises(ValueError, match=message):
        srv.parse_sse_line(line)


def test_level_figures():
    records = [{"ttft": 1.0, "e2e": 4.0, "tokens": 8}, {"ttft": 3.0, "e2e": 2.0, "tokens": 8}]
    f = srv.level_figures(records, 5.0, 2)
    assert f["aggregate_tokens_per_s"] == 16 / 5 and f["per_request_tokens_per_s"] == 3.0
    assert (f["ttft_p50"], f["e2e_p50"], f["requests"], f["tokens"]) == (2.0, 3.0, 2, 16)


# ------------------------------------------------------------------ against a fake server

FAKE_SERVER = r'''
import json, os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = sys.argv[1:]
if "--die" in args:
    print("load_model: error: failed to load model 'nope.gguf'", flush=True)
    sys.exit(3)
port = int(args[args.index("--port") + 1])
ready_at = time.monotonic() + 0.5  # /health says 503 while "loading"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _send(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if time.monotonic() < ready_at:
            self._send(503, {"error": {"code": 503, "message": "Loading model"}})
        else:
            self._send(200, {"status": "ok"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/v1/chat/completions":
            n = body["max_tokens"]
            timings = {"cache_n": 5, "prompt_n": 10 * len(body["messages"]), "prompt_ms": 250.0, "predicted_n": n,
                       "predicted_ms": 1000.0, "predicted_per_second": n / 1.0}
            reason = "tool_calls" if body.get("tool_choice") == "required" else "stop"
            return self._send(200, {"choices": [{"index": 0, "finish_reason": reason,
                                                 "message": {"role": "assistant", "content": "x"}}],
                                    "timings": timings})
        prompt = body.get("prompt")
        if not isinstance(prompt, list) or not prompt:
            return self._send(400, {"error": {"code": 400, "message": "invalid prompt", "type": "invalid_request_error"}})
        n = body["n_predict"]
        timings = {"cache_n": 0, "prompt_n": len(prompt), "predicted_n": n,
                   "predicted_per_second": 100.0 + body["seed"], "draft_n": 2 * n, "draft_n_accepted": n}
        if not body.get("stream"):
            return self._send(200, {"content": "x" * n, "stop": True, "timings": timings})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i in range(n):
            self.wfile.write(b"data: " + json.dumps({"content": "x", "tokens": [i], "stop": False}).encode() + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: " + json.dumps({"content": "", "tokens": [], "stop": True,
                                                "timings": timings}).encode() + b"\n\n")


ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''


@pytest.fixture
def fake_server(tmp_path):
    p = tmp_path / "llama-server"
    p.write_text(f"#!{sys.executable}\n{FAKE_SERVER}")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return str(p)


def _body(tokens, n, seed):
    return srv.completion_body(tokens, n=n, temp=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=seed)


def test_server_starts_answers_and_stops(fake_server):
    with srv.LlamaServer([fake_server, "-m", "t.gguf"], start_timeout=30, request_timeout=30) as server:
        proc = server._proc
        assert proc.poll() is None
        r = server.complete(_body([5, 6, 7], 4, seed=3))
        assert {k: r[k] for k in ("tokens_per_s", "tokens", "prompt_tokens", "drafted", "accepted")} == {
            "tokens_per_s": 103.0, "tokens": 4, "prompt_tokens": 3, "drafted": 8, "accepted": 4}
        chat = {"messages": [{"role": "user", "content": "hi"}] * 2, "tool_choice": "required"}
        c = server.chat(srv.chat_body(chat, n=6, temp=0.0, top_k=40, top_p=0.95, min_p=0.05, seed=0))
        assert (c["tokens"], c["prompt_tokens"], c["prompt_cached"], c["finish_reason"]) == (6, 25, 5, "tool_calls")
        assert c["prompt_s"] == 0.25 and c["decode_s"] == 1.0 and c["e2e"] > 0
        assert c["content"] == "x" and c["tool_calls"] == []
        s = server.stream(_body([5, 6], 6, seed=1))
        assert s["tokens"] == 6 and s["prompt_tokens"] == 2 and 0 <= s["ttft"] <= s["e2e"]
        with pytest.raises(srv.ServerError, match="HTTP 400: invalid prompt"):
            server.complete(_body([], 4, seed=0))
    assert proc.poll() is not None  # stopped on leaving the block


def test_server_stops_when_the_block_raises(fake_server):
    with pytest.raises(KeyboardInterrupt):
        with srv.LlamaServer([fake_server], start_timeout=30) as server:
            proc = server._proc
            raise KeyboardInterrupt
    assert proc.poll() is not None


def test_a_server_that_dies_at_start_is_one_line(fake_server):
    with pytest.raises(srv.ServerError) as e:
        with srv.LlamaServer([fake_server, "--die"], start_timeout=30):
            pass
    msg = str(e.value)
    assert "exited (code 3)" in msg and "failed to load model" in msg and "\n" not in msg


def test_a_missing_binary_is_one_line(tmp_path):
    with pytest.raises(srv.ServerError, match="cannot run"):
        with srv.LlamaServer([str(tmp_path / "llama-server")]):
            pass


def test_run_level_shares_the_prompts_among_the_clients(fake_server):
    bodies = [_body([1, 2, i + 3], n=i + 1, seed=i) for i in range(5)]
    with srv.LlamaServer([fake_server], start_timeout=30, request_timeout=30) as server:
        f = srv.run_level(server, bodies, 2)
    assert f["clients"] == 2 and f["requests"] == 5 and f["tokens"] == 1 + 2 + 3 + 4 + 5
    assert f["drafted"] == 2 * f["tokens"] and f["accepted"] == f["tokens"]
    assert f["ttft_p50"] <= f["e2e_p95"] and f["aggregate_tokens_per_s"] > 0
