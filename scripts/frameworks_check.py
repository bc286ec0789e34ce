"""Check a running ``serve`` with the agent frameworks assistants are built on, each used as
its own docs show: the official ``openai`` client, instructor, pydantic-ai, openai-agents,
langchain-openai and ``llm``.

    python -m resispec_gguf serve --port 8011 --max-tokens 200 &      # the default pair
    python3 -m venv /tmp/clientvenv
    /tmp/clientvenv/bin/pip install openai instructor "pydantic-ai-slim[openai]" openai-agents \\
        langchain-openai llm jsonschema
    /tmp/clientvenv/bin/python scripts/frameworks_check.py --base-url http://127.0.0.1:8011/v1

The libraries are not dependencies of the project (nor is this a test): run it from a
separate environment.  What it exercises, per framework where the framework offers it,
streamed and not:

* a tool whose parameters are nested Pydantic models (``$defs``/``$ref``, a list of nested
  models, an enum, ``Optional`` (``anyOf`` with null), a ``Literal``-discriminated union,
  ``pattern``, string and array bounds);
* structured output with a nested model (and a recursive one, with the ``openai`` client);
* tools together with a typed output (pydantic-ai ``output_type`` + tools, openai-agents
  ``output_type`` + function tools, langchain ``bind_tools(response_format=...)`` and
  ``with_structured_output(tools=...)``, ``openai`` ``parse`` with tools);
* instructor's ``response_model`` in TOOLS, TOOLS_STRICT and JSON modes;
* a tool round trip: the tool's result sent back, then the final answer.

A check passes when every HTTP answer was a 200 and the call parsed into the tool's model,
or the output validated under its model.  ``tool_choice`` "auto" checks need the model to
choose a call; a text reply there is counted as "text" (the model's choice, not a refusal).
The requests go through a small logging proxy, so the table also says how many requests each
check made (retries by the framework show there) and which request fields each framework
sent; ``--dump FILE`` writes every request body and answer.  Exit code 1 when any
check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import re
import sys
import threading
import time
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # frameworks_cases, beside this script

from frameworks_cases import CHECKS, Ctx, _configure_llm  # noqa: E402

# ------------------------------------------------------------------------- the logging proxy


class Log:
    """Every request body the proxy forwarded, by check, with its status and answer."""

    def __init__(self):
        self.check = "-"
        self.entries: list[dict] = []
        self.lock = threading.Lock()

    def add(self, entry: dict) -> dict:
        """Log a request as it starts (its status is set once it has been answered)."""
        entry = {"check": self.check, **entry}
        with self.lock:
            self.entries.append(entry)
        return entry

    def settled(self, timeout: float = 5.0) -> None:
        """Wait until every logged request has its status (the proxy sets it after the last
        byte, which the client may have read first)."""
        deadline = time.monotonic() + timeout
        while any(e["status"] is None for e in self.entries) and time.monotonic() < deadline:
            time.sleep(0.01)

    def of(self, check: str) -> list[dict]:
        return [e for e in self.entries if e["check"] == check]


def proxy(upstream: str, log: Log) -> ThreadingHTTPServer:
    """A loopback proxy to ``upstream`` (``http://host:port``) that logs request bodies and
    streams answers through as they come."""
    up = urllib.parse.urlsplit(upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # the answer ends when the connection closes

        def log_message(self, *args):
            pass

        def _forward(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            entry = log.add({"path": self.path, "body": body, "status": None, "answer": None})
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=900)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
            conn.request(self.command, self.path, body=raw or None, headers=headers)
            resp = conn.getresponse()
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                    self.send_header(k, v)
            self.send_header("Connection", "close")
            self.end_headers()
            answer = b""
            while chunk := resp.read1(65536):
                if len(answer) < 200_000:  # what came back, for --dump (and the error of a non-200)
                    answer += chunk
                self.wfile.write(chunk)
                self.wfile.flush()
            conn.close()
            entry["answer"] = answer.decode("utf-8", "replace")
            entry["status"] = resp.status

        do_GET = do_POST = _forward

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# ------------------------------------------------------------------------------------ running

def _sent_fields(entries) -> list[str]:
    """The request fields a framework sent, with the values that matter for tools."""
    seen = set()
    for e in entries:
        b = e["body"] if isinstance(e["body"], dict) else {}
        for k, v in b.items():
            if k in ("messages", "model", "tools"):
                continue
            if k == "response_format":
                rf = v.get("type") if isinstance(v, dict) else v
                strict = (v.get("json_schema") or {}).get("strict") if isinstance(v, dict) else None
                seen.add(f"response_format={rf}" + (f"(strict={strict})" if strict is not None else ""))
            elif k in ("tool_choice", "parallel_tool_calls", "stream_options"):
                seen.add(f"{k}={json.dumps(v)}")
            else:
                seen.add(k)
        for t in b.get("tools") or []:
            if isinstance(t, dict) and "strict" in (t.get("function") or {}):
                seen.add(f"tools.strict={t['function']['strict']}")
        for m in b.get("messages") or []:
            if isinstance(m, dict):
                seen.add(f"role:{m.get('role')}")
                if isinstance(m.get("content"), list):
                    seen.add("content:parts")
                if m.get("tool_calls") is not None and m.get("content") in (None, ""):
                    seen.add(f"tool_calls+content={json.dumps(m.get('content'))}")
                if "name" in m:
                    seen.add("message.name")
    return sorted(seen)


def run(args) -> int:
    log = Log()
    upstream = urllib.parse.urlsplit(args.base_url)
    server = proxy(f"{upstream.scheme}://{upstream.netloc}", log)
    base = f"http://127.0.0.1:{server.server_address[1]}{upstream.path}"
    _configure_llm(base, args.model)
    chosen = [(f"{framework}: {name}", fn) for framework, name, fn in CHECKS]
    if args.only:  # in the order the patterns are given
        patterns = [re.compile(p) for p in args.only.split(";")]
        chosen = [(label, fn) for p in patterns for label, fn in chosen if p.search(label)]
        chosen = list(dict.fromkeys(chosen))
    rows = []
    for label, fn in chosen:
        framework, name = label.split(": ", 1)
        good, whys = 0, []
        for attempt in range(args.attempts):
            log.check = label
            before = len(log.entries)
            t = time.monotonic()
            try:
                ok, why = fn(Ctx(base, args.model))
            except Exception as e:  # a framework's error: often a 4xx/5xx underneath, or its validation
                ok, why = False, f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
                if args.verbose:
                    traceback.print_exc()
            log.settled()
            bad = [e for e in log.entries[before:] if e["status"] != 200]
            if bad:
                ok = False
                why = f"HTTP {bad[0]['status']}: {(bad[0]['answer'] or '')[:160]}"
            good += bool(ok)
            if not ok:
                whys.append(why)
            print(f"  {label} [{attempt + 1}/{args.attempts}]: {'ok' if ok else 'FAILED ' + why} "
                  f"({len(log.entries) - before} requests, {time.monotonic() - t:.0f} s)", flush=True)
        requests = len(log.of(label))
        rows.append((framework, name, good, args.attempts, requests, sum(e["status"] != 200 for e in log.of(label)),
                     "; ".join(sorted(set(whys)))[:100]))
    print(f"\n{'framework':<14} {'check':<46} {'pass':>6} {'reqs':>5} {'!200':>5}  failures")
    for framework, name, good, tries, requests, non200, whys in rows:
        print(f"{framework:<14} {name:<46} {good:>3}/{tries:<2} {requests:>5} {non200:>5}  {whys}")
    print("\nrequest fields sent:")
    for framework in dict.fromkeys(r[0] for r in rows):
        entries = [e for e in log.entries if e["check"].startswith(framework + ":")]
        print(f"  {framework}: {', '.join(_sent_fields(entries))}")
    if args.dump:
        with open(args.dump, "w") as f:
            json.dump(log.entries, f, indent=1)
    server.shutdown()
    return 1 if any(r[2] < r[3] for r in rows) else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="the server's /v1 URL")
    ap.add_argument("--model", default="default", help="model name sent (any: the server has one)")
    ap.add_argument("--attempts", type=int, default=1, help="tries per check")
    ap.add_argument("--only", default="", help="';'-separated regular expressions: run the checks they match "
                                               "(see --list), in that order")
    ap.add_argument("--dump", default="", help="write every request body and answer to this JSON file")
    ap.add_argument("--verbose", action="store_true", help="print the tracebacks of failed checks")
    ap.add_argument("--list", action="store_true", help="list the checks and exit")
    args = ap.parse_args(argv)
    if args.list:
        for framework, name, _ in CHECKS:
            print(f"{framework}: {name}")
        return 0
    with contextlib.suppress(KeyboardInterrupt):
        return run(args)
    return 1


if __name__ == "__main__":
    sys.exit(main())
