"""The OpenAI-compatible server under load, end to end (continued from test_server.py): real
uvicorn servers on loopback ports, driven by raw ``httpx`` requests.

A "slow" engine (the tiny pair's tokenizer and chat template with a fake generator that
yields one piece every few milliseconds and records cancellation) tests the queue, client
disconnects and unexpected errors deterministically, and with two slots, requests running at
once; then the tiny pair with two slots serves concurrent requests (helpers in servers.py).
"""

from __future__ import annotations

import json
import threading
import time

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")
httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

from resispec_gguf.config import DraftParams, SamplingParams  # noqa: E402
from resispec_gguf.surfaces.server import create_app  # noqa: E402
from servers import MESSAGES, SlowEngine, api_error, read_until_content, serving, wait_for  # noqa: E402


@pytest.fixture(scope="module")
def slow(engine):
    engine = SlowEngine(engine)
    app = create_app(engine, model_name="slow", draft_params=DraftParams(),
                     sampling_defaults=SamplingParams(max_tokens=8), max_queue=1)
    with serving(app) as url:
        yield url, app, engine


# ---------------------------------------------------------------------------------- concurrency


def test_client_disconnect_mid_stream_cancels_generation(slow):
    url, app, engine = slow
    engine.closed_early.clear()
    body = {"messages": MESSAGES, "stream": True, "max_tokens": 100_000}  # ~17 minutes unless cancelled
    with httpx.Client(base_url=url, timeout=10) as http:
        with http.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            lines = r.iter_lines()
            read_until_content(lines)
            time.sleep(0.1)
            assert not engine.closed_early.is_set()  # still generating while the client is there
        assert engine.closed_early.wait(5), "the generation was not cancelled"
        wait_for(lambda: app.state.resispec.worker.inflight == 0)
        t = time.monotonic()
        r = http.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 3})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "xxx"
        assert time.monotonic() - t < 3


def test_a_client_gone_while_its_request_makes_no_text_is_cancelled_at_the_next_step(slow):
    """No piece comes after the first, so only the engine's own check before each step can
    see the client leave (the job thread waits for a piece that never comes)."""
    url, app, engine = slow
    engine.cancel_seen.clear()
    engine.quiet = True
    try:
        body = {"messages": MESSAGES, "stream": True, "max_tokens": 100_000}  # ~17 minutes unless cancelled
        with httpx.Client(base_url=url, timeout=10) as http:
            with http.stream("POST", "/v1/chat/completions", json=body) as r:
                lines = r.iter_lines()
                read_until_content(lines)
                time.sleep(0.1)
                assert not engine.cancel_seen.is_set()  # still stepping while the client is there
            assert engine.cancel_seen.wait(5), "the quiet generation was not cancelled"
            wait_for(lambda: app.state.resispec.worker.inflight == 0)
    finally:
        engine.quiet = False


def test_client_disconnect_while_waiting_non_streaming(slow):
    url, app, engine = slow
    engine.closed_early.clear()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{url}/v1/completions", json={"prompt": "a", "max_tokens": 100_000}, timeout=0.5)
    assert engine.closed_early.wait(5)
    wait_for(lambda: app.state.resispec.worker.inflight == 0)


def test_queue_full_is_503_and_queue_drains(slow):
    url, app, engine = slow
    worker = app.state.resispec.worker
    engine.max_active = 0
    results = {}

    def queued():
        results["b"] = httpx.post(f"{url}/v1/completions", json={"prompt": "b", "max_tokens": 5}, timeout=20)

    with httpx.Client(base_url=url, timeout=20) as http:
        with http.stream("POST", "/v1/chat/completions",
                         json={"messages": MESSAGES, "stream": True, "max_tokens": 100_000}) as a:
            lines = a.iter_lines()
            read_until_content(lines)  # A runs
            waiter = threading.Thread(target=queued)
            waiter.start()
            wait_for(lambda: worker.inflight == 2)  # B waits behind A (max_queue=1)
            for route, body in (("completions", {"prompt": "c"}), ("chat/completions", {"messages": MESSAGES})):
                c = http.post(f"/v1/{route}", json=body)
                assert c.headers["retry-after"] == "1"
                assert api_error(c, 503)["code"] == "queue_full"
            assert "b" not in results
        waiter.join(10)  # closing A lets B run
    assert results["b"].status_code == 200 and results["b"].json()["choices"][0]["text"] == "xxxxx"
    assert engine.max_active == 1  # one generation at a time
    wait_for(lambda: worker.inflight == 0)


def test_unexpected_error_is_500_and_server_survives(slow):
    url, app, engine = slow
    for stream in (False, True):
        engine.fail = True
        r = httpx.post(f"{url}/v1/completions", json={"prompt": "a", "stream": stream}, timeout=10)
        err = api_error(r, 500)
        assert err["type"] == "server_error" and err["code"] == "internal_error"
        assert "boom" not in r.text and "RuntimeError" not in r.text  # internals stay in the log
        ok = httpx.post(f"{url}/v1/completions", json={"prompt": "a", "max_tokens": 2}, timeout=10)
        assert ok.status_code == 200 and json.loads(ok.text)["choices"][0]["text"] == "xx"


# ---------------------------------------------------------------------------------- several slots


@pytest.fixture(scope="module")
def slow_slots(engine):
    engine = SlowEngine(engine)
    engine.n_slots = 2  # two requests run at once (the worker's threads); one may wait
    app = create_app(engine, model_name="slow", draft_params=DraftParams(),
                     sampling_defaults=SamplingParams(max_tokens=8), max_queue=1)
    with serving(app) as url:
        yield url, app, engine


def test_slots_run_requests_at_once_and_health_reports_them(slow_slots):
    url, app, engine = slow_slots
    worker = app.state.resispec.worker
    engine.max_active = 0
    body = {"messages": MESSAGES, "stream": True, "max_tokens": 100_000}
    with httpx.Client(base_url=url, timeout=20) as http:
        with http.stream("POST", "/v1/chat/completions", json=body) as a, \
                http.stream("POST", "/v1/chat/completions", json=body) as b:
            lines = a.iter_lines(), b.iter_lines()  # referenced: the streams stay open
            read_until_content(lines[0])
            read_until_content(lines[1])
            assert engine.max_active == 2  # both generate at once
            assert http.get("/health").json()["slots"] == {"busy": 2, "idle": 0, "waiting": 0}
            results = {}
            waiter = threading.Thread(target=lambda: results.setdefault(
                "c", httpx.post(f"{url}/v1/completions", json={"prompt": "c", "max_tokens": 3}, timeout=20)))
            waiter.start()
            wait_for(lambda: worker.inflight == 3)  # the third waits (max_queue=1) ...
            assert api_error(http.post("/v1/completions", json={"prompt": "d"}), 503)["code"] == "queue_full"
        waiter.join(10)  # ... and runs once a slot is free
        assert results["c"].status_code == 200 and results["c"].json()["choices"][0]["text"] == "xxx"
    wait_for(lambda: worker.inflight == 0)
    assert httpx.get(f"{url}/health").json()["slots"] == {"busy": 0, "idle": 2, "waiting": 0}


@pytest.fixture(scope="module")
def parallel(tiny_pair):
    from resispec_gguf.engine import Engine

    engine = Engine.load(str(tiny_pair[0]), str(tiny_pair[1]), n_ctx=512, n_threads=1, progress=False, n_slots=2)
    app = create_app(engine, model_name="tiny", draft_params=DraftParams(method="auto"),
                     sampling_defaults=SamplingParams(max_tokens=32), max_queue=4)
    with serving(app) as url:
        yield url, app, engine
    engine.close()


def test_a_slotted_engine_serves_concurrent_requests_and_one_bad_request_stays_its_own(parallel):
    url, app, engine = parallel
    out = {}

    def ask(i, body):
        out[i] = httpx.post(f"{url}/v1/completions", json=body, timeout=60)

    bodies = [{"prompt": f"Story {i}:", "max_tokens": 24, "seed": i} for i in range(4)]
    bodies.append({"prompt": "x", "max_tokens": 8, "response_format": {"type": "json_object"}, "seed": 9})
    bodies.append({"prompt": "y " * 600, "max_tokens": 8})  # does not fit its slot: a 400
    threads = [threading.Thread(target=ask, args=(i, b)) for i, b in enumerate(bodies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for i in range(5):
        assert out[i].status_code == 200, out[i].text
        assert out[i].json()["choices"][0]["finish_reason"] in ("length", "stop")
    assert out[5].status_code == 400
    wait_for(lambda: app.state.resispec.worker.inflight == 0)
    assert engine.slots()[0] == 0  # every slot free again


def test_a_client_leaving_mid_stream_frees_its_slot(parallel):
    url, app, engine = parallel
    body = {"prompt": "Once", "stream": True, "max_tokens": 400, "temperature": 1.0, "seed": 1}
    with httpx.Client(base_url=url, timeout=20) as http:
        with http.stream("POST", "/v1/completions", json=body) as r:
            assert r.status_code == 200 and next(line for line in r.iter_lines() if line.startswith("data: "))
    wait_for(lambda: app.state.resispec.worker.inflight == 0 and engine.slots()[0] == 0)
    r = httpx.post(f"{url}/v1/completions", json={"prompt": "Again", "max_tokens": 4}, timeout=20)
    assert r.status_code == 200
