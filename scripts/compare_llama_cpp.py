"""Our speculative decoding beside llama.cpp's own tools, on the same machine in the same run.

Points at a directory holding llama.cpp's ``llama-speculative-simple`` and ``llama-bench``
binaries (built by the user, ideally from the llama.cpp version that llama-cpp-python
vendors), then for every temperature and prompt runs, interleaved:

* ``llama-speculative-simple`` on the same target/draft pair, prompt text, temperature,
  sampling filters, seed, context and threads; its printed decode speed and draft acceptance
  are parsed from its log;
* ``llama-bench -p 0 -n N`` on the target: llama.cpp's plain token-generation speed;
* our engine, in this process, once per ``--methods`` entry on the same prompt tokens.

and prints one table per workload (``--workload``: the built-in code, edit and chat sets): tokens/s median over prompts, the median per-prompt ratio to our
``none`` (plain decoding through llama-cpp-python) and to llama-bench's tg speed, and the
draft acceptance.  Decode speeds exclude prompt processing on both sides.

Chat prompts are rendered to text with our engine's chat template and passed to llama.cpp
with ``-p`` verbatim (speculative-simple applies no template of its own; special tokens in
the text are parsed).  llama.cpp's speculative-simple drafts greedily (the draft's top token)
and accepts a draft token when the target's own sampler picks the same token, so its
acceptance at T > 0 is lower than a rejection-sampling rule's and is not comparable draw for
draw with ours; its numbers are reported as it prints them.  Its output, like ours, follows
the target's sampler exactly: the draft only changes the speed.

llama.cpp runs with its own defaults except where a flag above sets the same value for every
system, and one switch: the draft's "backend sampling" (on by default in recent builds) is
turned off, because on a CPU-only build it made speculative-simple about 20x slower here
(0.18 vs 3.6 tokens/s); ``--llama-backend-sampling`` keeps it on.

    python scripts/compare_llama_cpp.py --llama-cpp-bin /tmp/llama-build/bin \\
        [--target default] [--draft ...] [--workload code,edit,chat | --prompts FILE.jsonl] \\
        [--temperature 1.0 0.6] [--chain-depth 5] \\
        [--max-tokens 128] [--threads N] [--ctx 4096] [--seed 0] [--draft-max N [N ...]] \\
        [--methods none,resispec,auto] [--json OUT]

Errors (missing directory or binaries, a binary failing, a bad model) print one line and
exit with code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

SPEC_BIN = "llama-speculative-simple"
BENCH_BIN = "llama-bench"

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


def parse_llama_bench_json(text: str) -> float:
    """The token-generation speed (``avg_ts``, tokens/s) from ``llama-bench -o json``.

    Picks the first test with ``n_gen > 0`` and ``n_prompt == 0`` (a pure tg test), else the
    first test with ``n_gen > 0``.  Leading non-JSON noise before the array is skipped.
    Raises ``ValueError`` when no such test is found.
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
    tests = [r for r in rows if isinstance(r, dict) and (r.get("n_gen") or 0) > 0 and "avg_ts" in r]
    pure = [r for r in tests if (r.get("n_prompt") or 0) == 0]
    if not (pure or tests):
        raise ValueError("llama-bench JSON has no token-generation test with avg_ts")
    return float((pure or tests)[0]["avg_ts"])


def parse_version(text: str) -> str:
    """``version: 0.5.0-dev (build 1, commit 0c1e570)`` -> that string after ``version:``."""
    m = re.search(r"version:\s*(.+)", text)
    return m.group(1).strip() if m else "unknown"


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
    def __init__(self, bin_dir: str):
        d = Path(bin_dir).expanduser()
        if not d.is_dir():
            raise CompareError(f"--llama-cpp-bin {bin_dir}: not a directory")
        self.spec = d / SPEC_BIN
        self.bench = d / BENCH_BIN
        for p in (self.spec, self.bench):
            if not (p.is_file() and os.access(p, os.X_OK)):
                raise CompareError(f"{p}: no executable {p.name} in --llama-cpp-bin (build llama.cpp's {p.name} target)")
        help_text = self._help(self.spec)
        self.version = parse_version(self._out([str(self.bench), "--version"]))
        # flag names moved across llama.cpp versions: pick what this build understands
        self.draft_max_flag = next((f for f in ("--spec-draft-n-max", "--draft-max", "--draft") if help_has(help_text, f)), None)
        if self.draft_max_flag is None:
            raise CompareError(f"{self.spec.name} --help lists no draft-length flag; unsupported llama.cpp version")
        self.spec_type = help_has(help_text, "--spec-type")
        self.no_backend_sampling = "--no-spec-draft-backend-sampling" if help_has(help_text, "--no-spec-draft-backend-sampling") else None

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
        if draft_max is not None:
            cmd += [self.draft_max_flag, str(draft_max)]
        if self.spec_type:
            cmd += ["--spec-type", "draft-simple"]
        if self.no_backend_sampling and not backend_sampling:
            cmd.append(self.no_backend_sampling)
        if threads:
            cmd += ["-t", str(threads)]
        return cmd

    def bench_cmd(self, target, *, n, threads, reps) -> list[str]:
        cmd = [str(self.bench), "-m", str(target), "-p", "0", "-n", str(n), "-r", str(reps), "-o", "json"]
        if threads:
            cmd += ["-t", str(threads)]
        return cmd

    def run_spec(self, cmd, timeout) -> dict:
        proc = _run(cmd, timeout)
        try:
            return parse_spec_simple_output(proc.stderr + "\n" + proc.stdout)
        except ValueError as e:
            raise CompareError(f"{SPEC_BIN}: {e}") from None

    def run_bench(self, cmd, timeout) -> float:
        proc = _run(cmd, timeout)
        try:
            return parse_llama_bench_json(proc.stdout)
        except ValueError as e:
            raise CompareError(f"{BENCH_BIN}: {e}") from None


# --------------------------------------------------------------------------- summary and table


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarise(runs: list[dict], none_tps: list, bench_tps: list) -> dict:
    """runs: per prompt ``{"tokens_per_s", "tokens", "accept"}``; ratios are medians of
    per-prompt ratios against the same prompt's our-none and llama-bench speeds."""
    tps = [r["tokens_per_s"] for r in runs]
    vs_none = [t / b for t, b in zip(tps, none_tps) if b]
    vs_bench = [t / b for t, b in zip(tps, bench_tps) if b]
    acc_num = sum(r.get("accepted") or 0 for r in runs)
    acc_den = sum(r.get("drafted") or 0 for r in runs)
    return {
        "tokens_per_s": _median(tps),
        "vs_none": _median(vs_none),
        "vs_llama_bench": _median(vs_bench),
        "acceptance": acc_num / acc_den if acc_den else None,
        "tokens": sum(r.get("tokens") or 0 for r in runs),
        "runs": len(runs),
    }


def format_table(results: list[dict]) -> str:
    head = f"{'T':>4}  {'system / method':<32} {'tok/s':>7} {'vs ours none':>13} {'vs llama-bench tg':>18} {'accept':>7} {'tokens':>7}"
    lines = []

    def f(x, spec):
        return format(x, spec) if x is not None else "-"

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
                f"{block['temperature']:>4}  {name:<32} {f(s['tokens_per_s'], '.2f'):>7} {f(s['vs_none'], '.3f'):>13} "
                f"{f(s['vs_llama_bench'], '.3f'):>18} {f(s['acceptance'], '.3f'):>7} {s['tokens'] or '-':>7}"
            )
    return "\n".join(lines)


# --------------------------------------------------------------------------- driver


def _parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--llama-cpp-bin", required=True, metavar="DIR", help="directory with llama-speculative-simple and llama-bench")
    p.add_argument("--target", default="default", help="target: path, hf: spec or preset (default: default)")
    p.add_argument("--draft", default=None, help="draft: path, hf: spec or preset (default: the target preset's draft)")
    p.add_argument("--workload", default="code,edit,chat", help="built-in prompt sets, as for `bench` (default: all)")
    p.add_argument("--prompts", metavar="FILE.jsonl", help="prompts, as for `bench` (instead of --workload)")
    p.add_argument("--chain-depth", type=int, default=5, help="depth of our fixed `chain` method (default 5)")
    p.add_argument("--temperature", type=float, nargs="+", default=[1.0, 0.6])
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--threads", type=int, default=None, help="CPU threads for every system (default: all cores)")
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0, help="prompt i uses seed+i (same for every system)")
    p.add_argument("--draft-max", type=int, nargs="+", default=None, metavar="N",
                   help="llama.cpp's draft length(s) (its --spec-draft-n-max); several give one row each "
                        "(default: llama.cpp's own default, 3 in build 0c1e570)")
    p.add_argument("--methods", default="none,resispec,auto", help="our methods, comma-separated (none is always run)")
    p.add_argument("--bench-reps", type=int, default=1, help="llama-bench repetitions per prompt (default 1)")
    p.add_argument("--llama-backend-sampling", action="store_true",
                   help="leave llama.cpp's draft backend sampling on (its default; very slow on some CPU builds)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per llama.cpp run (default 900)")
    p.add_argument("--json", metavar="OUT", help="write config, per-run records and the summary as JSON")
    return p.parse_args(argv)


def _check_args(a) -> None:
    if a.max_tokens < 1:
        raise CompareError(f"--max-tokens must be >= 1, got {a.max_tokens}")
    if a.threads is not None and a.threads < 1:
        raise CompareError(f"--threads must be >= 1, got {a.threads}")
    if a.ctx < 16:
        raise CompareError(f"--ctx must be at least 16, got {a.ctx}")
    for n in a.draft_max or ():
        if n < 1:
            raise CompareError(f"--draft-max must be >= 1, got {n}")
    if a.bench_reps < 1:
        raise CompareError(f"--bench-reps must be >= 1, got {a.bench_reps}")
    for t in a.temperature:
        if not 0 <= t <= 100:
            raise CompareError(f"--temperature must be in [0, 100], got {t}")


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


def run(a) -> int:
    _check_args(a)
    llama = LlamaCpp(a.llama_cpp_bin)  # checks the binaries before anything heavy

    from resispec_gguf.surfaces import bench
    from resispec_gguf.llama import models
    from resispec_gguf.config import DraftParams, SamplingParams
    from resispec_gguf.engine import Engine

    methods = bench.parse_methods(a.methods)
    workloads = bench.select_prompts(a.prompts, a.workload)
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
        for dm in a.draft_max or [None]:
            w = llama.run_spec(llama.spec_cmd(target, draft, first_text, n=8, temp=a.temperature[0], seed=a.seed,
                                              draft_max=dm, **spec_common), a.timeout)
            spec_names[dm] = f"llama.cpp spec-simple n_max={w.get('n_draft', dm if dm is not None else '?')}"
        bench_name = "llama.cpp llama-bench tg"
        results, records = [], []
        total = len(a.temperature) * sum(len(t) for t in texts.values())
        done = 0
        for workload in texts:
            for temp in a.temperature:
                per: dict[str, list] = {**{f"ours {m}": [] for m in methods}, **{n: [] for n in spec_names.values()},
                                        bench_name: []}
                for i, (text, pt) in enumerate(zip(texts[workload], toks[workload])):
                    seed = a.seed + i
                    t0 = time.perf_counter()
                    # llama.cpp first, then ours, per prompt: the same load conditions for all
                    for dm, name in spec_names.items():
                        cmd = llama.spec_cmd(target, draft, text, n=a.max_tokens, temp=temp, seed=seed, draft_max=dm,
                                             **spec_common)
                        s = llama.run_spec(cmd, a.timeout)
                        per[name].append({"tokens_per_s": s["tokens_per_s"], "tokens": s["decoded_tokens"],
                                          "accepted": s.get("n_accept"), "drafted": s.get("n_drafted"), "raw": s})
                    tg = llama.run_bench(llama.bench_cmd(target, n=a.max_tokens, threads=threads, reps=a.bench_reps), a.timeout)
                    per[bench_name].append({"tokens_per_s": tg, "tokens": a.max_tokens * a.bench_reps})
                    for m in methods:
                        res = engine.generate(pt, sp0.replace(temperature=temp, seed=seed), _method_params(m, a))
                        per[f"ours {m}"].append(_ours_record(res.stats))
                    done += 1
                    _note(f"[{done}/{total}] {workload} T={temp} prompt {i}: "
                          + ", ".join(f"{k} {v[-1]['tokens_per_s']:.2f}" for k, v in per.items())
                          + f" tok/s ({time.perf_counter() - t0:.0f} s{_load_note()})")
                none_tps = [r["tokens_per_s"] for r in per["ours none"]]
                bench_tps = [r["tokens_per_s"] for r in per[bench_name]]
                rows = {name: summarise(rs, none_tps, bench_tps) for name, rs in per.items()}
                results.append({"workload": workload, "temperature": temp, "rows": rows})
                records.append({"workload": workload, "temperature": temp, "runs": per})

    print(format_table(results))
    print(f"llama.cpp {llama.version}; threads {threads}; prompts per workload: "
          f"{', '.join(f'{w} {len(t)}' for w, t in texts.items())}; max tokens {a.max_tokens}; "
          f"top-k {a.top_k} top-p {a.top_p} min-p {a.min_p}; seed {a.seed}+i")
    print("tok/s: median over prompts of decode speed (prompt processing excluded); ratios: median per-prompt ratio.")
    print("accept: ours = accepted/verified draft tokens over all tree nodes; llama.cpp = n_accept/n_drafted "
          "(greedy draft, accepted when the target's sampler picks the same token), as printed.")
    if a.json:
        report = {
            "config": {k: v for k, v in vars(a).items()},
            "llama_cpp": {"version": llama.version, "bin": str(Path(a.llama_cpp_bin).expanduser().resolve()),
                          "spec_cmd_examples": [llama.spec_cmd(target, draft, "<PROMPT>", n=a.max_tokens, draft_max=dm,
                                                               temp=a.temperature[0], seed=a.seed, **spec_common)
                                                for dm in spec_names],
                          "bench_cmd": llama.bench_cmd(target, n=a.max_tokens, threads=threads, reps=a.bench_reps)},
            "models": {"target": str(target), "draft": str(draft)},
            "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "threads": threads},
            "prompts": workloads,
            "results": results,
            "runs": records,
        }
        try:
            with open(a.json, "w", encoding="utf-8") as f:
                json.dump(report, f, indent=2)
        except OSError as e:
            raise CompareError(f"cannot write {a.json}: {e.strerror}") from None
    return 0


def main(argv=None) -> int:
    a = _parse_args(argv)
    try:
        from resispec_gguf.errors import UserError
    except ImportError:  # pragma: no cover - the package is not installed
        UserError = CompareError  # noqa: N806
    try:
        return run(a)
    except (CompareError, UserError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
