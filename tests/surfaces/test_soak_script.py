"""scripts/soak.py (issue #26's memory soak) against a real server on the tiny pair for a few
seconds: every kind of request ends as it must (abandoned streams, the 400), memory is
sampled, and a server that answers 500 or a kind that ends badly is reported as a failure.
Never a time or a memory figure."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("uvicorn")

from starlette.applications import Starlette  # noqa: E402
from starlette.responses import JSONResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

from resispec_gguf.config import SamplingParams  # noqa: E402
from resispec_gguf.engine import Engine  # noqa: E402
from resispec_gguf.surfaces.server import create_app  # noqa: E402
from servers import serving  # noqa: E402

from script_loader import load_script  # noqa: E402
soak = load_script("soak")


def test_a_short_soak_on_the_tiny_pair_ends_every_request_well(fim_pair):
    engine = Engine.load(str(fim_pair[0]), str(fim_pair[1]), n_ctx=1024, n_threads=1, progress=False,
                         n_slots=2)
    app = create_app(engine, model_name="tiny", sampling_defaults=SamplingParams(max_tokens=16))
    with serving(app) as url:
        s = soak.Soak(url, os.getpid(), clients=3, seconds=6, max_tokens=8, sample=1, seed=0)
        s.run(lambda: True)
    engine.close()
    out = soak.report(s)
    assert out["failures"] == [], out["counts"]
    kinds = {k.split(":")[0] for k in out["counts"]}
    assert {"abandon", "bad", "chat"} <= kinds, out["counts"]
    assert out["counts"].get("bad:400", 0) > 0
    assert out["samples"] >= 2 and out["rss_first_mb"] > 0


def _failing_app():
    async def fail(request):
        return JSONResponse({"error": "boom"}, status_code=500)

    async def health(request):
        return JSONResponse({"status": "ok", "slots": {"busy": 0}})

    paths = ["/v1/chat/completions", "/v1/completions", "/infill"]
    return Starlette(routes=[Route(p, fail, methods=["POST"]) for p in paths] + [Route("/health", health)])


def test_a_500_is_a_failure():
    with serving(_failing_app()) as url:
        s = soak.Soak(url, os.getpid(), clients=1, seconds=1, max_tokens=8, sample=0.5, seed=0)
        s.run(lambda: True)
    fails = s.failures()
    assert fails and all(": 500" in line for line in fails)


def test_drift_is_the_steady_state_slope_in_mb_per_minute():
    samples = [(t, 100.0 + (0.0 if t < 60 else 0.5 * (t - 60)), {}) for t in range(0, 241, 10)]
    steady, slope = soak.drift(samples)
    assert min(steady) >= 100.0 and slope == pytest.approx(30.0)
    flat = [(t, 200.0, {}) for t in range(0, 100, 5)]
    assert soak.drift(flat)[1] == 0.0
