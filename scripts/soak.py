"""A mixed concurrent soak of ``serve``: does memory stay flat, does every request end well?

Starts ``python -m resispec_gguf serve`` (or uses ``--url`` with ``--pid``), then runs
``--clients`` threads for ``--minutes``.  Each client loops over a mix of the requests local
assistants send, chosen at random:

* chat, streamed, read to the end;
* chat, streamed and **abandoned** after a few chunks (the connection is closed mid-reply);
* chat, not streamed, with ``method`` auto or none;
* a text completion; an ``/infill`` request (when the model has fill-in-the-middle tokens);
* a tool call with ``tool_choice`` "required" and a nested (``$defs``) parameter schema;
* ``response_format`` json_schema;
* a bad request (an unknown method), which must be a 400.

Every ``--sample`` seconds it reads the server's resident memory (``VmRSS`` of its process)
and its ``/health`` slots.  At the end it prints the RSS samples' first, steady-state
(after the first quarter of the run) minimum and maximum, the last, and the drift: the slope
of a least-squares line through the steady-state samples, in MB per minute.  Then the
counts of answers by status and kind.

Exit status 1 when the server died, any request got a 5xx or a connection error other than
the abandoned ones, or a request got a status its kind must not get; 0 otherwise.  Nothing
about speed is judged.

    python scripts/soak.py [--minutes 10] [--clients 6] [--parallel 4] [--ctx 4096] \\
        [--threads 2] [--max-tokens 48] [--target default] [--draft ...] [--sample 5] \\
        [--seed 0] [--json OUT]
    python scripts/soak.py --url http://127.0.0.1:8080 --pid PID ...   # a running server
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.parse


def free_port() -> int:
    """A free local TCP port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TOOLS = [{
    "type": "function",
    "function": {
        "name": "place_order",
        "description": "Place an order for some items.",
        "parameters": {
            "$defs": {"Item": {"type": "object", "properties": {"sku": {"type": "string"},
                                                                "qty": {"type": "integer", "minimum": 1}},
                               "required": ["sku", "qty"]}},
            "type": "object",
            "properties": {"customer": {"type": "string"},
                           "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}, "minItems": 1}},
            "required": ["customer", "items"],
        },
    },
}]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                           "tags": {"type": "array", "items": {"type": "string"}}},
          "required": ["name", "age"]}
QUESTIONS = ["Write a Python function that reverses a string.", "What is a hash map? Two sentences.",
             "Explain recursion to a beginner.", "Give three uses of a queue.",
             "Write a SQL query that counts users per country.", "What does HTTP 404 mean?"]
KINDS = ["stream", "abandon", "chat", "completion", "infill", "tools", "schema", "bad"]


class SoakError(Exception):
    """One line for the user (exit 2)."""


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise SoakError(f"no VmRSS for process {pid}")


def request_for(kind: str, rng: random.Random, max_tokens: int) -> tuple[str, dict]:
    """The path and JSON body of one request of ``kind``."""
    q = rng.choice(QUESTIONS)
    chat = {"messages": [{"role": "user", "content": q}], "max_tokens": max_tokens}
    if kind in ("stream", "abandon"):
        return "/v1/chat/completions", {**chat, "stream": True}
    if kind == "chat":
        return "/v1/chat/completions", {**chat, "method": rng.choice(["auto", "none"])}
    if kind == "completion":
        return "/v1/completions", {"prompt": "def fibonacci(n):\n", "max_tokens": max_tokens}
    if kind == "infill":
        return "/infill", {"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n\nprint(add(1, 2))\n",
                           "n_predict": max_tokens}
    if kind == "tools":
        msg = [{"role": "user", "content": "Order two of sku A1 for Ann."}]
        return "/v1/chat/completions", {"messages": msg, "tools": TOOLS, "tool_choice": "required",
                                        "max_tokens": 4 * max_tokens}
    if kind == "schema":
        msg = [{"role": "user", "content": "Describe a made-up person as JSON."}]
        return "/v1/chat/completions", {"messages": msg, "max_tokens": 4 * max_tokens, "response_format": {
            "type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}}
    if kind == "bad":
        return "/v1/chat/completions", {**chat, "method": "no-such-method"}
    raise ValueError(kind)


def send(base: str, kind: str, path: str, body: dict, rng: random.Random, timeout: float) -> str:
    """Send one request; returns the outcome: the status, or "abandoned" for a stream closed
    on purpose mid-reply.  Raises OSError on a connection problem."""
    url = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if kind == "abandon" and resp.status == 200:
            for _ in range(rng.randint(1, 6)):  # a few chunks, then the client goes away
                if not resp.fp.readline():
                    break
            return "abandoned"
        resp.read()
        return str(resp.status)
    finally:
        conn.close()


# the statuses each kind may end with (infill: 400 when the model has no FIM tokens)
ALLOWED = {k: {"200"} for k in KINDS}
ALLOWED["abandon"] = {"abandoned", "200"}
ALLOWED["infill"] = {"200", "400"}
ALLOWED["bad"] = {"400"}


class Soak:
    def __init__(self, base: str, pid: int, clients: int, seconds: float, max_tokens: int, sample: float,
                 seed: int):
        self.base, self.pid, self.clients, self.seconds = base, pid, clients, seconds
        self.max_tokens, self.sample, self.seed = max_tokens, sample, seed
        self.counts: dict[tuple[str, str], int] = {}
        self.samples: list[tuple[float, float, dict]] = []  # (seconds, RSS MB, slots)
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def _client(self, i: int) -> None:
        rng = random.Random(self.seed * 1000 + i)
        while not self.stop.is_set():
            kind = rng.choice(KINDS)
            path, body = request_for(kind, rng, self.max_tokens)
            try:
                outcome = send(self.base, kind, path, body, rng, timeout=600)
            except OSError as e:
                outcome = f"connection error ({type(e).__name__})"
            with self.lock:
                self.counts[(kind, outcome)] = self.counts.get((kind, outcome), 0) + 1

    def _health(self) -> dict:
        try:
            url = urllib.parse.urlsplit(self.base)
            conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
            conn.request("GET", "/health")
            return json.loads(conn.getresponse().read()).get("slots", {})
        except (OSError, ValueError):
            return {}

    def run(self, alive) -> None:
        threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(self.clients)]
        start = time.monotonic()
        for t in threads:
            t.start()
        while time.monotonic() - start < self.seconds and alive():
            self.samples.append((time.monotonic() - start, rss_mb(self.pid), self._health()))
            self.stop.wait(self.sample)
        self.stop.set()
        for t in threads:
            t.join(660)
        if alive():
            self.samples.append((time.monotonic() - start, rss_mb(self.pid), self._health()))

    def failures(self) -> list[str]:
        return [f"{kind}: {outcome} ×{n}" for (kind, outcome), n in sorted(self.counts.items())
                if outcome not in ALLOWED[kind]]


def drift(samples: list[tuple[float, float, dict]]) -> tuple[list[float], float]:
    """The steady-state RSS values (after the first quarter of the run) and their
    least-squares slope in MB per minute."""
    if not samples:
        return [], 0.0
    end = samples[-1][0]
    steady = [(t, r) for t, r, _ in samples if t >= end / 4] or [(t, r) for t, r, _ in samples]
    n = len(steady)
    mt = sum(t for t, _ in steady) / n
    mr = sum(r for _, r in steady) / n
    var = sum((t - mt) ** 2 for t, _ in steady)
    slope = sum((t - mt) * (r - mr) for t, r in steady) / var if var > 0 else 0.0
    return [r for _, r in steady], slope * 60.0


def report(soak: Soak) -> dict:
    steady, slope = drift(soak.samples)
    rss = [r for _, r, _ in soak.samples]
    out = {"samples": len(rss), "rss_first_mb": rss[0] if rss else None, "rss_last_mb": rss[-1] if rss else None,
           "steady_min_mb": min(steady) if steady else None, "steady_max_mb": max(steady) if steady else None,
           "drift_mb_per_min": slope, "requests": sum(soak.counts.values()),
           "counts": {f"{k}:{o}": n for (k, o), n in sorted(soak.counts.items())}, "failures": soak.failures(),
           "max_busy": max((s.get("busy", 0) for _, _, s in soak.samples), default=0)}
    return out


def _start_server(args) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "resispec_gguf", "serve", "--port", str(port), "--parallel", str(args.parallel),
           "--ctx", str(args.ctx), "--target", args.target, "--max-tokens", str(args.max_tokens)]
    if args.draft is not None:
        cmd += ["--draft", args.draft]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SoakError(f"the server exited at start: {proc.stderr.read().strip().splitlines()[-1:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return proc, base
        except OSError:
            time.sleep(1)
    proc.kill()
    raise SoakError("the server did not answer /health within 10 minutes")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--target", default="default")
    ap.add_argument("--draft", default=None)
    ap.add_argument("--sample", type=float, default=5.0, help="seconds between RSS samples")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--url", help="soak a running server (with --pid) instead of starting one")
    ap.add_argument("--pid", type=int, help="the running server's process id (its RSS is read)")
    ap.add_argument("--json", help="write the report here")
    args = ap.parse_args(argv)
    if args.minutes <= 0 or args.clients < 1 or args.sample <= 0:
        print("error: --minutes, --clients and --sample must be positive", file=sys.stderr)
        return 2
    if (args.url is None) != (args.pid is None):
        print("error: --url and --pid go together", file=sys.stderr)
        return 2
    proc = None
    try:
        if args.url:
            base, pid = args.url.rstrip("/"), args.pid
            rss_mb(pid)
        else:
            proc, base = _start_server(args)
            pid = proc.pid
        soak = Soak(base, pid, args.clients, args.minutes * 60, args.max_tokens, args.sample, args.seed)
        soak.run(lambda: os.path.exists(f"/proc/{pid}") and (proc is None or proc.poll() is None))
        died = proc is not None and proc.poll() is not None
    except (SoakError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    out = report(soak)
    out["server_died"] = died
    print(f"{out['requests']} requests from {args.clients} clients over {args.minutes:g} min "
          f"(--parallel {args.parallel} --ctx {args.ctx}); busy slots seen at most {out['max_busy']}")
    print(f"RSS MB: first {out['rss_first_mb']:.0f}, steady min {out['steady_min_mb']:.0f} / max "
          f"{out['steady_max_mb']:.0f}, last {out['rss_last_mb']:.0f}; drift {out['drift_mb_per_min']:+.1f} MB/min "
          f"over {out['samples']} samples")
    for key, n in out["counts"].items():
        print(f"  {key:32s} {n}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    bad = out["failures"] + (["the server died"] if died else [])
    for line in bad:
        print(f"FAIL {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
