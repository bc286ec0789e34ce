"""Our speculative decoding beside llama.cpp's own tools, on the same machine in the same run.

Points at a directory holding llama.cpp's ``llama-speculative-simple``, ``llama-bench`` and
``llama-server`` binaries (built by the user, ideally from the llama.cpp version that
llama-cpp-python vendors), then for every temperature and prompt runs, interleaved:

* ``llama-speculative-simple`` on the same target/draft pair, prompt text, temperature,
  sampling filters, seed, context and threads; its printed decode speed and draft acceptance
  are parsed from its log;
* ``llama-bench -p 0 -n N -d 0,P`` on the target: llama.cpp's plain token-generation speed
  with an empty KV cache and with P tokens in it, P the prompt's length, which is the depth
  where every system here decodes (llama.cpp's tg speed falls as the cache fills);
* ``llama-server`` (one slot, no draft, started once on a free local port) answering
  ``/completion`` with the prompt as the same token ids, the same sampling settings and
  seed: llama.cpp's plain decoding with sampling on; its ``timings.predicted_per_second``;
* our engine, in this process, once per ``--methods`` entry on the same prompt tokens.

and prints one table per workload (``--workload``: the built-in code, edit and chat sets;
``--n-prompts`` keeps the first N of each): tokens/s median over prompts, the median
per-prompt ratio to our ``none`` (plain decoding through llama-cpp-python), to llama-bench's
tg speed at the prompt's depth and to llama-server, and the draft acceptance; then one line
per table with our ``none`` against llama.cpp's plain decoding.  Decode speeds exclude prompt
processing everywhere.

``--concurrency 1,4`` compares serving instead: at each level c, c client threads share a
workload's prompts (client i takes prompts i, i + c, ...) and send them back to back, to our
engine with ``max(levels)`` slots (exactly ``bench --concurrency``, per method: ``none`` and
``auto`` by default) and, interleaved, streamed over HTTP to ``llama-server -np max(levels)``
(unified KV cache, ``--ctx`` tokens per slot) without and with its draft model (one server per
``--draft-max``).  It prints the aggregate tokens/s (all tokens over the level's wall time),
its ratio to our ``none`` at the same level, the mean per-request tokens/s, and the time to
first token and end-to-end time as the client sees them, p50 and p95; ``--rounds R`` repeats
the interleaved levels (odd rounds in reverse order) and reports medians.  Both sides keep
their prompt caches as by default (llama-server keeps finished prompts in a RAM cache and
restores them into any slot, ours reuses a slot's cached prefix), and before the rounds every
system serves the workload once, untimed, at the top level: so no system finds the prompts
cold because it happened to run first, and the time to first token mostly measures queueing
and a cached prefill.

``--workload agent`` compares a coding agent's tool loop instead (``compare_agent``): the
``bench`` agent workload's chat requests (tools, a source file in a tool result, a
``write_file`` call or JSON as the answer) sent in order over ``/v1/chat/completions`` to a
fresh ``llama-server`` per speculative type (``none``, ``draft-simple``, ``ngram-mod``,
``draft-simple,ngram-mod``, and ``ngram-cache`` where the build has it), and run by our
engine one method's whole sequence at a time, started cold as a fresh server; the table gives
prompt and decode seconds and end-to-end tokens/s, which long agent prompts dominate.

Chat prompts are rendered to text with our engine's chat template and passed to
speculative-simple with ``-p`` verbatim (it applies no template of its own; special tokens in
the text are parsed).  llama.cpp's speculative decoding drafts greedily (the draft's top token)
and accepts a draft token when the target's own sampler picks the same token, so its
acceptance at T > 0 is lower than a rejection-sampling rule's and is not comparable draw for
draw with ours; its numbers are reported as it prints them.  Its output, like ours, follows
the target's sampler exactly: the draft only changes the speed.

llama.cpp runs with its own defaults except where a flag above sets the same value for every
system, and one switch: the draft's "backend sampling" (on by default in recent builds) is
turned off, because on a CPU-only build it made speculative-simple about 20x slower here
(0.18 vs 3.6 tokens/s); ``--llama-backend-sampling`` keeps it on.  Flag names are read from
each binary's ``--help`` (they moved across llama.cpp versions).

    python scripts/compare_llama_cpp.py --llama-cpp-bin /tmp/llama-build/bin \\
        [--target default] [--draft ...] [--workload code,edit,chat | agent | --prompts FILE.jsonl] \\
        [--n-prompts N] [--temperature 1.0 0.6] [--chain-depth 5] \\
        [--max-tokens 128] [--threads N] [--ctx 4096] [--seed 0] [--draft-max N [N ...]] \\
        [--methods none,resispec,auto] [--no-spec-simple] [--concurrency 1,4 [--rounds R]] [--json OUT]

Errors (missing directory or binaries, a binary failing, a server not starting or refusing a
request, a bad model or argument) print one line and exit with code 2; a started server is
always stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_agent  # noqa: E402  (the sibling scripts' helpers)
import llama_server_client as srv  # noqa: E402

SPEC_BIN = "llama-speculative-simple"
BENCH_BIN = "llama-bench"
BENCH_D0 = "llama.cpp llama-bench tg d=0"
BENCH_AT = "llama.cpp llama-bench tg d=prompt"
SERVER_ROW = "llama.cpp llama-server"
DEFAULT_TOKENS = 128

_NUM = r"([-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf))"


class CompareError(Exception):
    """A one-line problem for the user (exit code 2)."""


# --------------------------------------------------------------------------- parsing (pure)


def parse_spec_simple_output(text: str) -> dict:
    """Parse the log of ``llama-speculative-simple`` (stderr, or stdout+stderr).

    Returns ``decoded_tokens``, ``decode_s``, ``tokens_per_s`` (its "decoded ... speed"),
    ``encoded_tokens``, ``encode_s``, ``encode_tokens_per_s`` when printed, and ``n_draft``,
    ``n_predict``, ``n_drafted``, ``n_accept``, ``accept`` (a fraction, from its percentage)
    when printed.  Raises ``ValueError`` when there is no "decoded" line.
    """
    out: dict = {}
    line = r"(?:^|\s)%s\s+(\d+)\s+tokens\s+in\s+" + _NUM + r"\s+seconds,\s+speed:\s+" + _NUM + r"\s+t/s"
    m = None
    for m in re.finditer(line % "decoded", text, re.MULTILINE):
        pass
    if m is None:
        raise ValueError("no 'decoded N tokens in S seconds, speed: X t/s' line in the output")
    out["decoded_tokens"] = int(m.group(1))
    out["decode_s"] = float(m.group(2))
    out["tokens_per_s"] = float(m.group(3))
    m = None
    for m in re.finditer(line % "encoded", text, re.MULTILINE):
        pass
    if m is not None:
        out["encoded_tokens"] = int(m.group(1))
        out["encode_s"] = float(m.group(2))
        out["encode_tokens_per_s"] = float(m.group(3))
    for key in ("n_draft", "n_predict", "n_drafted", "n_accept"):
        found = re.findall(r"(?:^|\s)%s\s*=\s*(-?\d+)\s*$" % key, text, re.MULTILINE)
        if found:
            out[key] = int(found[-1])
    found = re.findall(r"(?:^|\s)accept\s*=\s*" + _NUM + r"\s*%", text, re.MULTILINE)
    if found:
        out["accept"] = float(found[-1]) / 100.0
    if out.get("n_drafted"):
        out["accept"] = out.get("n_accept", 0) / out["n_drafted"]
    elif "accept" in out and out["accept"] != out["accept"]:  # nan: nothing drafted
        out["accept"] = None
    return out


def parse_llama_bench_json(text: str) -> dict[int, float]:
    """The token-generation speeds (``avg_ts``, tokens/s) from ``llama-bench -p 0 -o json``,
    by KV depth: ``{n_depth: avg_ts}`` over the pure tg tests (``n_gen > 0``, ``n_prompt == 0``;
    ``n_depth`` 0 when the build does not print it).  Leading non-JSON noise before the array
    is skipped.  Raises ``ValueError`` when there is no such test.
    """
    start = text.find("[")
    if start < 0:
        raise ValueError("no JSON array in llama-bench output")
    try:
        rows, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as e:
        raise ValueError(f"llama-bench output is not valid JSON ({e.msg})") from None
    if not isinstance(rows, list):
        raise ValueError("llama-bench JSON is not a list of tests")
    out: dict[int, float] = {}
    for r in rows:
        if isinstance(r, dict) and (r.get("n_gen") or 0) > 0 and not (r.get("n_prompt") or 0) and "avg_ts" in r:
            out.setdefault(int(r.get("n_depth") or 0), float(r["avg_ts"]))
    if not out:
        raise ValueError("llama-bench JSON has no token-generation test (n_prompt 0) with avg_ts")
    return out


def parse_version(text: str) -> str:
    """``version: 0.5.0-dev (build 1, commit 0c1e570)`` -> that string after ``version:``."""
    m = re.search(r"version:\s*(.+)", text)
    return m.group(1).strip() if m else "unknown"


def help_default(help_text: str, flag: str):
    """The ``(default: N)`` that ``--help`` prints on ``flag``'s line, as an int; None if none."""
    for ln in help_text.splitlines():
        if help_has(ln, flag):
            m = re.search(r"\(default:\s*(-?\d+)\)", ln)
            return int(m.group(1)) if m else None
    return None


def help_has(help_text: str, flag: str) -> bool:
    return re.search(r"(?:^|[\s,])%s(?:[\s,=]|$)" % re.escape(flag), help_text, re.MULTILINE) is not None


# --------------------------------------------------------------------------- llama.cpp runs


def _one_line(text: str, limit: int = 200) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    last = lines[-1] if lines else "(no output)"
    return last if len(last) <= limit else last[: limit - 3] + "..."


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    name = os.path.basename(cmd[0])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise CompareError(f"{name} did not finish within {timeout:.0f} s") from None
    except OSError as e:
        raise CompareError(f"cannot run {cmd[0]}: {e.strerror}") from None
    if proc.returncode != 0:
        raise CompareError(f"{name} failed (exit {proc.returncode}): {_one_line(proc.stderr or proc.stdout)}")
    return proc



class LlamaCpp:
    """The three binaries in ``--llama-cpp-bin``, checked up front, with the flag names this
    build understands (read from each one's ``--help``: they moved across versions)."""

    def __init__(self, bin_dir: str):
        d = Path(bin_dir).expanduser()
        if not d.is_dir():
            raise CompareError(f"--llama-cpp-bin {bin_dir}: not a directory")
        self.spec, self.bench, self.server = d / SPEC_BIN, d / BENCH_BIN, d / srv.SERVER_BIN
        for p in (self.spec, self.bench, self.server):
            if not (p.is_file() and os.access(p, os.X_OK)):
                raise CompareError(f"{p}: no executable {p.name} in --llama-cpp-bin (build llama.cpp's {p.name} target)")
        help_text = self._help(self.spec)
        server_help = self._help(self.server)
        self.version = parse_version(self._out([str(self.bench), "--version"]))
        self.draft_max_flag = _draft_max_flag(help_text, self.spec.name)
        self.server_draft_max_flag = _draft_max_flag(server_help, self.server.name)
        self.spec_type = help_has(help_text, "--spec-type")
        self.server_spec_type = help_has(server_help, "--spec-type")
        self.server_spec_types = compare_agent.spec_types(server_help)
        self.no_backend_sampling = "--no-spec-draft-backend-sampling" if help_has(help_text, "--no-spec-draft-backend-sampling") else None
        self.server_no_backend_sampling = ("--no-spec-draft-backend-sampling"
                                           if help_has(server_help, "--no-spec-draft-backend-sampling") else None)
        self.server_kv_unified = help_has(server_help, "--kv-unified")
        self.server_draft_max_default = help_default(server_help, self.server_draft_max_flag)
        # llama-bench's -d (KV depth before the timed run) came in mid-2025
        self.bench_depth = help_has(self._help(self.bench), "--n-depth")

    @staticmethod
    def _out(cmd) -> str:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=60, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise CompareError(f"cannot run {cmd[0]}: {getattr(e, 'strerror', None) or e}") from None
        return proc.stdout + proc.stderr

    def _help(self, exe: Path) -> str:
        text = self._out([str(exe), "--help"])
        if "--model" not in text:
            raise CompareError(f"{exe} --help printed no usage; is it llama.cpp's {exe.name}?")
        return text

    def spec_cmd(self, target, draft, prompt, *, n, temp, top_k, top_p, min_p, draft_max, threads, ctx, seed,
                 backend_sampling=False) -> list[str]:
        cmd = [str(self.spec), "-m", str(target), "-md", str(draft), "-p", prompt, "-n", str(n),
               "--temp", repr(float(temp)), "--top-k", str(top_k), "--top-p", repr(float(top_p)),
               "--min-p", repr(float(min_p)), "-c", str(ctx), "-s", str(seed), "--color", "off"]
        cmd += _draft_args(self.draft_max_flag, draft_max, self.spec_type, self.no_backend_sampling, backend_sampling)
        if threads:
            cmd += ["-t", str(threads)]
        return cmd

    def bench_cmd(self, target, *, n, threads, reps, depths=(0,)) -> list[str]:
        """llama-bench's tg test of ``n`` tokens after ``depths`` tokens in the KV cache (one
        test per depth; depth 0 only on a build without ``-d``)."""
        cmd = [str(self.bench), "-m", str(target), "-p", "0", "-n", str(n), "-r", str(reps), "-o", "json"]
        depths = list(dict.fromkeys(int(x) for x in depths)) if self.bench_depth else [0]
        if depths != [0]:
            cmd += ["-d", ",".join(map(str, depths))]
        if threads:
            cmd += ["-t", str(threads)]
        return cmd

    def server_cmd(self, target, *, draft=None, draft_max=None, parallel=1, ctx, threads,
                   backend_sampling=False, spec_types=None) -> list[str]:
        """``llama-server`` with ``parallel`` slots of ``ctx`` tokens each over one unified KV
        cache (as ours), with ``draft`` as its draft model when given; ``spec_types``: its
        ``--spec-type`` list (default with a draft: draft-simple)."""
        cmd = [str(self.server), "-m", str(target), "-c", str(ctx * parallel), "-np", str(parallel)]
        if self.server_kv_unified:
            cmd.append("--kv-unified")
        if draft is not None:
            cmd += ["-md", str(draft)] + _draft_args(self.server_draft_max_flag, draft_max, self.server_spec_type,
                                                      self.server_no_backend_sampling, backend_sampling,
                                                      spec_types or "draft-simple")
        elif spec_types is not None and self.server_spec_type:  # draft-free types (n-grams)
            cmd += ["--spec-type", spec_types]
        if threads:
            cmd += ["-t", str(threads), "-tb", str(threads)]
        return cmd

    def run_spec(self, cmd, timeout) -> dict:
        proc = _run(cmd, timeout)
        try:
            return parse_spec_simple_output(proc.stderr + "\n" + proc.stdout)
        except ValueError as e:
            raise CompareError(f"{SPEC_BIN}: {e}") from None

    def run_bench(self, cmd, timeout) -> dict[int, float]:
        proc = _run(cmd, timeout)
        try:
            return parse_llama_bench_json(proc.stdout)
        except ValueError as e:
            raise CompareError(f"{BENCH_BIN}: {e}") from None


def _draft_max_flag(help_text: str, name: str) -> str:
    found = next((f for f in ("--spec-draft-n-max", "--draft-max", "--draft") if help_has(help_text, f)), None)
    if found is None:
        raise CompareError(f"{name} --help lists no draft-length flag; unsupported llama.cpp version")
    return found


# --------------------------------------------------------------------------- summary and table


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarise(runs: list[dict], baselines: dict[str, list]) -> dict:
    """runs: per prompt ``{"tokens_per_s", "tokens", "accepted", "drafted"}``; ``vs_<name>``
    for every baseline (per-prompt tokens/s: ``none`` ours, ``bench`` llama-bench tg at the
    prompt's depth, ``server`` llama-server) is the median of per-prompt ratios against the
    same prompt's baseline speed."""
    tps = [r["tokens_per_s"] for r in runs]
    acc_num = sum(r.get("accepted") or 0 for r in runs)
    acc_den = sum(r.get("drafted") or 0 for r in runs)
    out = {"tokens_per_s": _median(tps)}
    for name, base in baselines.items():
        out[f"vs_{name}"] = _median([t / b for t, b in zip(tps, base) if t is not None and b])
    out.update(acceptance=acc_num / acc_den if acc_den else None,
               tokens=sum(r.get("tokens") or 0 for r in runs), runs=len(runs))
    return out


def _f(x, spec):
    return format(x, spec) if x is not None else "-"


def format_table(results: list[dict]) -> str:
    head = (f"{'T':>4}  {'system / method':<34} {'tok/s':>7} {'vs ours none':>13} {'vs bench@depth':>15} "
            f"{'vs server':>10} {'accept':>7} {'tokens':>7}")
    lines = []
    workload = object()
    for block in results:
        if block.get("workload") != workload:
            workload = block.get("workload")
            if lines:
                lines.append("")
            if workload is not None:
                lines.append(f"workload: {workload}")
            lines += [head, "-" * len(head)]
        for name, s in block["rows"].items():
            lines.append(
                f"{block['temperature']:>4}  {name:<34} {_f(s['tokens_per_s'], '.2f'):>7} {_f(s.get('vs_none'), '.3f'):>13} "
                f"{_f(s.get('vs_bench'), '.3f'):>15} {_f(s.get('vs_server'), '.3f'):>10} "
                f"{_f(s['acceptance'], '.3f'):>7} {s['tokens'] or '-':>7}"
            )
    return "\n".join(lines)


def plain_ratios(per: dict[str, list]) -> dict[str, list]:
    """Per prompt, our ``none`` tokens/s over llama.cpp's plain decoding: ``bench0``
    (llama-bench tg at depth 0), ``bench`` (at the prompt's depth), ``server`` (llama-server);
    a prompt where either speed is missing is left out."""
    ours = [r["tokens_per_s"] for r in per["ours none"]]
    out = {}
    for name, row in (("bench0", BENCH_D0), ("bench", BENCH_AT), ("server", SERVER_ROW)):
        out[name] = [o / r["tokens_per_s"] for o, r in zip(ours, per.get(row, [])) if o and r["tokens_per_s"]]
    return out


def plain_summary(records: list[dict]) -> str:
    """One line per block (``{"workload", "temperature", "runs"}``) and one over every prompt
    of the run: our ``none`` against llama.cpp's plain decoding, medians of per-prompt ratios."""
    def line(label, ratios, n):
        return (f"{label}: ours none / llama-bench tg at depth 0 {_f(_median(ratios['bench0']), '.3f')}, "
                f"at the prompt's depth {_f(_median(ratios['bench']), '.3f')}; / llama-server "
                f"{_f(_median(ratios['server']), '.3f')} ({n} prompts)")

    lines, pooled = [], {"bench0": [], "bench": [], "server": []}
    for block in records:
        ratios = plain_ratios(block["runs"])
        for k, v in ratios.items():
            pooled[k] += v
        where = f"{block['workload']} " if block.get("workload") is not None else ""
        lines.append(line(f"{where}T={block['temperature']}", ratios, len(block["runs"]["ours none"])))
    if len(records) > 1:
        lines.append(line("all", pooled, sum(len(b["runs"]["ours none"]) for b in records)))
    return "\n".join(lines)


FIGURES = ("aggregate_tokens_per_s", "per_request_tokens_per_s", "ttft_p50", "ttft_p95", "e2e_p50", "e2e_p95")


def median_rows(rows: list[dict]) -> list[dict]:
    """One row per (workload, system, clients), in first-seen order, each figure the median
    over its rounds; ``rounds`` says how many."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["workload"], r["system"], r["clients"]), []).append(r)
    return [{"workload": w, "system": s, "clients": c, "rounds": len(rs),
             **{k: statistics.median(r[k] for r in rs) for k in FIGURES}}
            for (w, s, c), rs in groups.items()]


def format_concurrency_table(rows: list[dict]) -> str:
    """Per workload and level, every system's figures and its aggregate against ours ``none``
    at the same level."""
    head = (f"{'workload':9} {'system':36} {'clients':>7} {'agg tok/s':>9} {'vs none':>7} {'req tok/s':>9} "
            f"{'TTFT p50':>9} {'TTFT p95':>9} {'e2e p50':>8} {'e2e p95':>8}")
    lines = [head, "-" * len(head)]
    base = {(r["workload"], r["clients"]): r["aggregate_tokens_per_s"] for r in rows if r["system"] == "ours none"}
    for r in rows:
        b = base.get((r["workload"], r["clients"]))
        vs = r["aggregate_tokens_per_s"] / b if b else None
        lines.append(f"{r['workload']:9} {r['system']:36} {r['clients']:>7} {r['aggregate_tokens_per_s']:>9.2f} "
                     f"{_f(vs, '.3f'):>7} {r['per_request_tokens_per_s']:>9.2f} {r['ttft_p50']:>8.2f}s "
                     f"{r['ttft_p95']:>8.2f}s {r['e2e_p50']:>7.2f}s {r['e2e_p95']:>7.2f}s")
    return "\n".join(lines)


# --------------------------------------------------------------------------- driver


def _spec_rows(text: str) -> list[str]:
    labels = [t.strip() for t in text.split(";") if t.strip()]
    known = [label for label, _, _ in compare_agent.SPEC_ROWS]
    bad = [t for t in labels if t not in known]
    if bad or not labels:
        raise argparse.ArgumentTypeError(f"unknown llama-server row {bad[0] if bad else text!r}; "
                                         f"known: {'; '.join(known)}")
    return labels


def _parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--llama-cpp-bin", required=True, metavar="DIR",
                   help="directory with llama-speculative-simple, llama-bench and llama-server")
    p.add_argument("--target", default="default", help="target: path, hf: spec or preset (default: default)")
    p.add_argument("--draft", default=None, help="draft: path, hf: spec or preset (default: the target preset's draft)")
    p.add_argument("--workload", default="code,edit,chat",
                   help="built-in prompt sets, as for `bench` (default: code,edit,chat); agent runs alone: a tool "
                        "loop against llama-server's speculative types")
    p.add_argument("--prompts", metavar="FILE.jsonl", help="prompts, as for `bench` (instead of --workload)")
    p.add_argument("--n-prompts", type=int, default=None, metavar="N", help="only the first N prompts of each workload")
    p.add_argument("--chain-depth", type=int, default=5, help="depth of our fixed `chain` method (default 5)")
    p.add_argument("--temperature", type=float, nargs="+", default=[1.0, 0.6])
    p.add_argument("--max-tokens", type=int, default=None,
                   help=f"tokens per reply, for every prompt (default {DEFAULT_TOKENS}; the agent workload's items "
                        "ask their own)")
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--threads", type=int, default=None, help="CPU threads for every system (default: all cores)")
    p.add_argument("--ctx", type=int, default=4096, help="context per request (per slot with --concurrency)")
    p.add_argument("--seed", type=int, default=0, help="prompt i uses seed+i (same for every system)")
    p.add_argument("--draft-max", type=int, nargs="+", default=None, metavar="N",
                   help="llama.cpp's draft length(s) (its --spec-draft-n-max); several give one row each "
                        "(default: llama.cpp's own default, 3 in build 0c1e570)")
    p.add_argument("--methods", default=None,
                   help="our methods, comma-separated (none is always run; default none,resispec,auto, "
                        "with --concurrency none,auto)")
    p.add_argument("--spec-rows", default=None, type=_spec_rows, metavar="TYPE[;TYPE...]",
                   help="with --workload agent: only these llama-server rows, ';'-separated (default: all of "
                        + "; ".join(label for label, _, _ in compare_agent.SPEC_ROWS) + ")")
    p.add_argument("--concurrency", default=None, metavar="N[,N...]",
                   help="instead: client counts; ours (bench --concurrency) against llama-server -np max(N) "
                        "with and without its draft")
    p.add_argument("--no-spec-simple", action="store_true",
                   help="skip llama-speculative-simple (plain decoding and our methods only)")
    p.add_argument("--rounds", type=int, default=1,
                   help="with --concurrency: run the interleaved levels R times, report medians (default 1)")
    p.add_argument("--bench-reps", type=int, default=1, help="llama-bench repetitions per prompt (default 1)")
    p.add_argument("--llama-backend-sampling", action="store_true",
                   help="leave llama.cpp's draft backend sampling on (its default; very slow on some CPU builds)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per llama.cpp run (default 900)")
    p.add_argument("--json", metavar="OUT", help="write config, per-run records and the summary as JSON")
    return p.parse_args(argv)


def _check_args(a) -> None:
    if a.max_tokens is not None and a.max_tokens < 1:
        raise CompareError(f"--max-tokens must be >= 1, got {a.max_tokens}")
    if a.threads is not None and a.threads < 1:
        raise CompareError(f"--threads must be >= 1, got {a.threads}")
    if a.ctx < 16:
        raise CompareError(f"--ctx must be at least 16, got {a.ctx}")
    if a.n_prompts is not None and a.n_prompts < 1:
        raise CompareError(f"--n-prompts must be >= 1, got {a.n_prompts}")
    for n in a.draft_max or ():
        if n < 1:
            raise CompareError(f"--draft-max must be >= 1, got {n}")
    if a.rounds < 1:
        raise CompareError(f"--rounds must be >= 1, got {a.rounds}")
    if a.bench_reps < 1:
        raise CompareError(f"--bench-reps must be >= 1, got {a.bench_reps}")
    if a.timeout <= 0:
        raise CompareError(f"--timeout must be > 0, got {a.timeout}")
    for t in a.temperature:
        if not 0 <= t <= 100:
            raise CompareError(f"--temperature must be in [0, 100], got {t}")


def _draft_args(max_flag: str, draft_max, spec_type: bool, no_backend_sampling, backend_sampling: bool,
                types: str = "draft-simple") -> list[str]:
    """The flags that set a llama.cpp binary's draft (speculative-simple's or the server's,
    each with its own flag names): ``draft_max`` tokens a step when given, the speculation
    ``types`` (default the plain draft model) where the build has speculation types, and its
    backend sampling off unless ``backend_sampling``."""
    args = [max_flag, str(draft_max)] if draft_max is not None else []
    if spec_type:
        args += ["--spec-type", types]
    if no_backend_sampling and not backend_sampling:
        args.append(no_backend_sampling)
    return args


def _note(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _load_note() -> str:
    """The 1-minute load average, so that runs disturbed by other jobs show up in the log."""
    try:
        return f", load {os.getloadavg()[0]:.2f}"
    except (AttributeError, OSError):
        return ""


def _ours_record(stats) -> dict:
    return {
        "tokens_per_s": stats.tokens_per_s,
        "tokens": stats.tokens,
        "accepted": sum(stats.accepted_by_depth),
        "drafted": sum(stats.reached_by_depth),
        "decode_s": stats.total_time,
        "tau": stats.tau,
    }


def _method_params(method: str, a):
    """Our method ``method``: ``chain`` is a depth-``--chain-depth`` chain, the others use the
    engine's default tree (auto: as upper bounds)."""
    from resispec_gguf.config import DraftParams

    if method == "chain":
        return DraftParams(method="chain", draws=1, depth=a.chain_depth, budget=a.chain_depth)
    return DraftParams(method=method)


def _setup(a) -> dict:
    """Everything both modes need, checked before anything heavy: the binaries, our methods,
    the prompts, the concurrency levels, both models, the sampling settings."""
    _check_args(a)
    llama = LlamaCpp(a.llama_cpp_bin)

    from resispec_gguf.surfaces import bench, concurrency
    from resispec_gguf.llama import models
    from resispec_gguf.config import SamplingParams

    levels = concurrency.parse_levels(a.concurrency) if a.concurrency is not None else None
    methods = bench.parse_methods(a.methods or ("none,auto" if levels else "none,resispec,auto"))
    workloads = {w: ps[: a.n_prompts] for w, ps in bench.select_prompts(a.prompts, a.workload).items()}
    if a.max_tokens is not None:  # for every item; else the agent items ask their own
        workloads = bench.without_max_tokens(workloads)
    a.max_tokens = a.max_tokens or DEFAULT_TOKENS
    agent = [w for w, items in workloads.items() if bench.is_sequential(items)]
    if agent and (len(workloads) > 1 or levels):
        raise CompareError(f"--workload {agent[0]} (a tool loop) runs alone, without --concurrency")
    kind, _ = models.parse_model_spec(a.target)
    draft_spec = a.draft if a.draft is not None else (a.target if kind == "preset" else None)
    if not draft_spec:
        raise CompareError("--draft is required when --target is not a preset")
    target = models.resolve_model(a.target, role="target")
    draft = models.resolve_model(draft_spec, role="draft")
    try:
        sp0 = SamplingParams(temperature=a.temperature[0], top_k=a.top_k, top_p=a.top_p, min_p=a.min_p,
                             max_tokens=a.max_tokens, seed=a.seed)
    except ValueError as e:
        raise CompareError(str(e)) from None
    _note(f"llama.cpp {llama.version} from {Path(a.llama_cpp_bin).expanduser().resolve()}")
    return dict(llama=llama, levels=levels, methods=methods, workloads=workloads, target=target, draft=draft,
                sp0=sp0, agent=bool(agent))


def _server_body(a, tokens, *, temp, seed, stream=False) -> dict:
    return srv.completion_body(tokens, n=a.max_tokens, temp=temp, top_k=a.top_k, top_p=a.top_p, min_p=a.min_p,
                               seed=seed, stream=stream)


def run(a) -> int:
    cfg = _setup(a)
    if cfg["levels"]:
        return run_concurrency(a, cfg)
    if cfg["agent"]:
        return run_agent(a, cfg)
    return run_single(a, cfg)


def run_agent(a, cfg) -> int:
    """``--workload agent``: the tool loop on llama-server's speculative types and our
    methods, each in sequence (``compare_agent``)."""
    out = compare_agent.run_agent(a, cfg, _method_params, _note)
    llama = cfg["llama"]
    print(compare_agent.format_agent_table(out["blocks"]))
    print(f"llama.cpp {llama.version}; threads {out['threads']}; {len(cfg['workloads']['agent'])} agent requests in "
          f"sequence per system (a fresh llama-server per row, ours started cold per method); top-k {a.top_k} "
          f"top-p {a.top_p} min-p {a.min_p}; seed {a.seed}+i")
    print("seconds are totals over the sequence; prompt s: prompt processing (ours: tgt s target, dft s draft); "
          "e2e tok/s: output tokens over prompt + decode seconds; accept: accepted/drafted tokens.")
    if a.json:
        _write_json(a, cfg, out["threads"], {"llama_cpp": {"version": llama.version, "server_cmds": out["server_cmds"]},
                                             "results": [{k: b[k] for k in ("temperature", "rows")}
                                                         for b in out["blocks"]],
                                             "runs": out["blocks"]})
    return 0


def run_single(a, cfg) -> int:
    """One request at a time: per temperature and prompt, llama.cpp's speculative-simple,
    llama-bench tg (depth 0 and the prompt's depth), llama-server, then our methods."""
    from resispec_gguf.config import DraftParams
    from resispec_gguf.engine import Engine

    llama, methods, workloads, target, draft, sp0 = (cfg[k] for k in ("llama", "methods", "workloads", "target",
                                                                      "draft", "sp0"))
    with Engine.load(str(target), str(draft), n_ctx=a.ctx, n_threads=a.threads) as engine:
        threads = a.threads or engine.n_threads
        texts = {w: [engine.render_chat(p["messages"]) if "messages" in p else p["prompt"] for p in ps]
                 for w, ps in workloads.items()}
        toks = {w: [engine.text_tokens(t) for t in ts] for w, ts in texts.items()}
        first_text, first_toks = next(iter(texts.values()))[0], next(iter(toks.values()))[0]
        # warm-up: Numba kernels, auto's cost curves, page cache for llama.cpp's mmap
        for m in methods:
            engine.generate(first_toks, sp0.replace(max_tokens=8), DraftParams(method=m))
        spec_common = dict(top_k=a.top_k, top_p=a.top_p, min_p=a.min_p, threads=threads, ctx=a.ctx,
                           backend_sampling=a.llama_backend_sampling)
        spec_names = {}
        for dm in [] if a.no_spec_simple else a.draft_max or [None]:
            w = llama.run_spec(llama.spec_cmd(target, draft, first_text, n=8, temp=a.temperature[0], seed=a.seed,
                                              draft_max=dm, **spec_common), a.timeout)
            spec_names[dm] = f"llama.cpp spec-simple n_max={w.get('n_draft', dm if dm is not None else '?')}"
        server_cmd = llama.server_cmd(target, parallel=1, ctx=a.ctx, threads=threads)
        results, records = [], []
        total = len(a.temperature) * sum(len(t) for t in texts.values())
        done = 0
        with srv.LlamaServer(server_cmd, request_timeout=a.timeout) as server:
            server.complete(_server_body(a, first_toks, temp=a.temperature[0], seed=a.seed) | {"n_predict": 8})
            for workload in texts:
                for temp in a.temperature:
                    per: dict[str, list] = {**{f"ours {m}": [] for m in methods}, **{n: [] for n in spec_names.values()},
                                            BENCH_D0: [], BENCH_AT: [], SERVER_ROW: []}
                    for i, (text, pt) in enumerate(zip(texts[workload], toks[workload])):
                        seed = a.seed + i
                        t0 = time.perf_counter()
                        # llama.cpp first, then ours, per prompt: the same load conditions for all
                        for dm, name in spec_names.items():
                            cmd = llama.spec_cmd(target, draft, text, n=a.max_tokens, temp=temp, seed=seed,
                                                 draft_max=dm, **spec_common)
                            s = llama.run_spec(cmd, a.timeout)
                            per[name].append({"tokens_per_s": s["tokens_per_s"], "tokens": s["decoded_tokens"],
                                              "accepted": s.get("n_accept"), "drafted": s.get("n_drafted"), "raw": s})
                        tg = llama.run_bench(llama.bench_cmd(target, n=a.max_tokens, threads=threads, reps=a.bench_reps,
                                                             depths=(0, len(pt))), a.timeout)
                        n_bench = a.max_tokens * a.bench_reps
                        per[BENCH_D0].append({"tokens_per_s": tg.get(0), "tokens": n_bench, "depth": 0})
                        per[BENCH_AT].append({"tokens_per_s": tg.get(len(pt)), "tokens": n_bench, "depth": len(pt)})
                        r = server.complete(_server_body(a, pt, temp=temp, seed=seed))
                        if r["prompt_tokens"] != len(pt):  # e.g. a BOS added: then the depths differ
                            _note(f"note: llama-server decoded after {r['prompt_tokens']} prompt tokens, ours {len(pt)}")
                        per[SERVER_ROW].append(r)
                        for m in methods:
                            res = engine.generate(pt, sp0.replace(temperature=temp, seed=seed), _method_params(m, a))
                            per[f"ours {m}"].append(_ours_record(res.stats))
                        done += 1
                        _note(f"[{done}/{total}] {workload} T={temp} prompt {i} ({len(pt)} tokens): "
                              + ", ".join(f"{k} {_f(v[-1]['tokens_per_s'], '.2f')}" for k, v in per.items())
                              + f" tok/s ({time.perf_counter() - t0:.0f} s{_load_note()})")
                    base = {name: [r["tokens_per_s"] for r in per[row]]
                            for name, row in (("none", "ours none"), ("bench", BENCH_AT), ("server", SERVER_ROW))}
                    rows = {name: summarise(rs, base) for name, rs in per.items()}
                    results.append({"workload": workload, "temperature": temp, "rows": rows})
                    records.append({"workload": workload, "temperature": temp, "runs": per})

    print(format_table(results))
    print(plain_summary(records))
    print(f"llama.cpp {llama.version}; threads {threads}; prompts per workload: "
          f"{', '.join(f'{w} {len(t)}' for w, t in texts.items())}; max tokens {a.max_tokens}; "
          f"top-k {a.top_k} top-p {a.top_p} min-p {a.min_p}; seed {a.seed}+i")
    print("tok/s: median over prompts of decode speed (prompt processing excluded); ratios: median per-prompt ratio; "
          "bench@depth: llama-bench tg with the prompt's tokens in the KV cache (-d), where every system decodes.")
    print("accept: ours = accepted/verified draft tokens over all tree nodes; llama.cpp = n_accept/n_drafted "
          "(greedy draft, accepted when the target's sampler picks the same token), as printed.")
    if a.json:
        _write_json(a, cfg, threads, {
            "llama_cpp": {"version": llama.version, "bin": str(Path(a.llama_cpp_bin).expanduser().resolve()),
                          "spec_cmd_examples": [llama.spec_cmd(target, draft, "<PROMPT>", n=a.max_tokens, draft_max=dm,
                                                               temp=a.temperature[0], seed=a.seed, **spec_common)
                                                for dm in spec_names],
                          "bench_cmd": llama.bench_cmd(target, n=a.max_tokens, threads=threads, reps=a.bench_reps,
                                                       depths=(0, len(first_toks))),
                          "server_cmd": server_cmd},
            "results": results, "runs": records})
    return 0


def run_concurrency(a, cfg) -> int:
    """``--concurrency``: per workload, round and level, interleaved, our engine (``bench
    --concurrency``'s clients, per method) and llama-server ``-np max(levels)`` without and
    with its draft (per ``--draft-max``), the same prompt tokens sent back to back by the same
    number of client threads; odd rounds reverse the order.  Medians over the rounds."""
    from resispec_gguf.config import DraftParams
    from resispec_gguf.engine import Engine
    from resispec_gguf.surfaces import bench, concurrency

    llama, levels, methods, workloads, target, draft, sp0 = (
        cfg[k] for k in ("llama", "levels", "methods", "workloads", "target", "draft", "sp0"))
    temp = a.temperature[0]
    if len(a.temperature) > 1:
        _note(f"--concurrency runs at the first --temperature only ({temp})")
    slots = max(levels)
    with Engine.load(str(target), str(draft), n_ctx=a.ctx, n_threads=a.threads, n_slots=slots) as engine:
        threads = a.threads or engine.n_threads
        prompts = bench.planned_prompts(engine, workloads, None)
        sp = sp0.replace(temperature=temp)
        first = next(iter(prompts.values()))[0][0]
        for m in methods:  # warm-up, as in the single-request mode
            engine.generate(first, sp.replace(max_tokens=8), DraftParams(method=m))
        cmds = {f"llama.cpp server -np {slots}": llama.server_cmd(target, parallel=slots, ctx=a.ctx, threads=threads)}
        for dm in a.draft_max or [None]:
            n_max = dm if dm is not None else llama.server_draft_max_default
            cmds[f"llama.cpp server -np {slots} +draft n_max={n_max if n_max is not None else '?'}"] = llama.server_cmd(
                target, draft=draft, draft_max=dm, parallel=slots, ctx=a.ctx, threads=threads,
                backend_sampling=a.llama_backend_sampling)
        rows = []
        with contextlib.ExitStack() as stack:
            servers = {name: stack.enter_context(srv.LlamaServer(cmd, request_timeout=a.timeout))
                       for name, cmd in cmds.items()}
            for s in servers.values():
                s.complete(_server_body(a, first, temp=temp, seed=a.seed) | {"n_predict": 8})
            for workload, items in prompts.items():
                bodies = [_server_body(a, tokens, temp=temp, seed=a.seed + i, stream=True)
                          for i, (tokens, _plan) in enumerate(items)]
                systems = [(f"ours {m}", lambda c, m=m: concurrency.run_level(engine, items, c, sp, _method_params(m, a)))
                           for m in methods]
                systems += [(name, lambda c, s=s: srv.run_level(s, bodies, c)) for name, s in servers.items()]
                # untimed: every system serves the workload once at the top level, so that all
                # start the rounds with its prompts cached as far as their caches hold them
                for name, level in systems:
                    level(slots)
                _note(f"{workload}: every system served the workload once (untimed){_load_note()}")
                for rnd in range(a.rounds):
                    for c in levels:
                        # odd rounds run the systems in reverse order: neither side always goes first
                        for name, level in systems[::-1] if rnd % 2 else systems:
                            rows.append({"workload": workload, "system": name, "round": rnd, **level(c)})
                            _note_level(rows[-1])

    print(format_concurrency_table(median_rows(rows)))
    print(f"llama.cpp {llama.version}; threads {threads}; slots {slots} (llama-server -np {slots}, unified KV); "
          f"prompts per workload: {', '.join(f'{w} {len(p)}' for w, p in prompts.items())}; max tokens "
          f"{a.max_tokens}; T {temp} top-k {a.top_k} top-p {a.top_p} min-p {a.min_p}; seed {a.seed}+i")
    print(f"agg tok/s: all tokens over the level's wall time; vs none: against ours none at the same level; "
          f"req tok/s: mean of tokens / end-to-end time; TTFT and e2e as the client sees them; "
          f"medians over {a.rounds} round(s).")
    if a.json:
        _write_json(a, cfg, threads, {"llama_cpp": {"version": llama.version, "server_cmds": cmds}, "levels": levels,
                                      "rows": rows})
    return 0


def _note_level(r: dict) -> None:
    _note(f"{r['workload']} {r['system']} c={r['clients']}: {r['aggregate_tokens_per_s']:.2f} tok/s aggregate, "
          f"TTFT p50 {r['ttft_p50']:.2f} s{_load_note()}")


def _write_json(a, cfg, threads, body: dict) -> None:
    report = {
        "config": dict(vars(a)),
        "models": {"target": str(cfg["target"]), "draft": str(cfg["draft"])},
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "threads": threads},
        "prompts": cfg["workloads"],
        **body,
    }
    try:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
    except OSError as e:
        raise CompareError(f"cannot write {a.json}: {e.strerror}") from None


def main(argv=None) -> int:
    a = _parse_args(argv)
    try:
        from resispec_gguf.errors import UserError
    except ImportError:  # pragma: no cover - the package is not installed
        UserError = CompareError  # noqa: N806
    try:
        return run(a)
    except (CompareError, srv.ServerError, UserError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _stop_on_sigterm(signum, _frame):
    raise SystemExit(128 + signum)  # unwinds the with-blocks: a started llama-server is stopped


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    sys.exit(main())
