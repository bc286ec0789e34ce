"""llama.cpp's binaries for the comparison: ``LlamaCpp`` checks that ``DIR`` holds
``llama-speculative-simple``, ``llama-bench`` and ``llama-server``, reads from each one's
``--help`` the flag names this build understands (they moved across llama.cpp versions) and
builds and runs their commands; the parsers of their output are pure, tested on output
captured from a real build."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from .common import CompareError
from .server_client import SERVER_BIN

SPEC_BIN = "llama-speculative-simple"
BENCH_BIN = "llama-bench"

_NUM = r"([-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf))"


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


# --------------------------------------------------------------------------- the binaries


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
    """The three binaries in ``bench --against llama.cpp DIR``, checked up front, with the
    flag names this build understands (read from each one's ``--help``: they moved across
    versions)."""

    def __init__(self, bin_dir: str):
        d = Path(bin_dir).expanduser()
        if not d.is_dir():
            raise CompareError(f"--against llama.cpp {bin_dir}: not a directory")
        self.spec, self.bench, self.server = d / SPEC_BIN, d / BENCH_BIN, d / SERVER_BIN
        for p in (self.spec, self.bench, self.server):
            if not (p.is_file() and os.access(p, os.X_OK)):
                raise CompareError(f"--against llama.cpp {bin_dir}: no executable {p.name} in it "
                                   f"(build llama.cpp's {p.name} target)")
        help_text = self._help(self.spec)
        server_help = self._help(self.server)
        self.version = parse_version(self._out([str(self.bench), "--version"]))
        self.draft_max_flag = _draft_max_flag(help_text, self.spec.name)
        self.server_draft_max_flag = _draft_max_flag(server_help, self.server.name)
        self.spec_type = help_has(help_text, "--spec-type")
        self.server_spec_type = help_has(server_help, "--spec-type")
        self.server_spec_types = spec_types(server_help)
        self.no_backend_sampling = ("--no-spec-draft-backend-sampling"
                                    if help_has(help_text, "--no-spec-draft-backend-sampling") else None)
        self.server_no_backend_sampling = ("--no-spec-draft-backend-sampling"
                                           if help_has(server_help, "--no-spec-draft-backend-sampling") else None)
        self.server_kv_unified = help_has(server_help, "--kv-unified")
        self.server_draft_max_default = help_default(server_help, self.server_draft_max_flag)
        # llama-bench's -d (KV depth before the timed run) came in mid-2025
        bench_help = self._help(self.bench)
        self.bench_depth = help_has(bench_help, "--n-depth")
        # flash attention as ours runs it (off on the CPU alone, ``backend.cpu_flash_attn``):
        # llama.cpp's own default (auto: on) makes its speculative steps dearer on a CPU
        self.fa = {exe: _fa_off(h) for exe, h in
                   ((self.spec, help_text), (self.server, server_help), (self.bench, bench_help))}

    def _fa_args(self, exe: Path) -> list[str]:
        """Flash attention off in ``exe``'s spelling (``_fa_off``); nothing where its
        ``--help`` lists no such flag."""
        return ["-fa", self.fa[exe]] if self.fa[exe] else []

    @staticmethod
    def _out(cmd) -> str:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=60,
                                  stdin=subprocess.DEVNULL)
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
        return cmd + self._fa_args(self.spec)

    def bench_cmd(self, target, *, n, threads, reps, depths=(0,)) -> list[str]:
        """llama-bench's tg test of ``n`` tokens after ``depths`` tokens in the KV cache (one
        test per depth; depth 0 only on a build without ``-d``)."""
        cmd = [str(self.bench), "-m", str(target), "-p", "0", "-n", str(n), "-r", str(reps), "-o", "json"]
        depths = list(dict.fromkeys(int(x) for x in depths)) if self.bench_depth else [0]
        if depths != [0]:
            cmd += ["-d", ",".join(map(str, depths))]
        if threads:
            cmd += ["-t", str(threads)]
        return cmd + self._fa_args(self.bench)

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
        return cmd + self._fa_args(self.server)

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


def _fa_off(help_text: str) -> str | None:
    """How a binary's ``--help`` says flash attention off: ``off`` (``<on|off|auto>``), ``0``
    (older builds' ``<0|1>``), or None where it has no such flag."""
    line = next((ln for ln in help_text.splitlines() if help_has(ln, "--flash-attn")), None)
    if line is None:
        return None
    return "0" if "0|1" in line else "off"


def _draft_max_flag(help_text: str, name: str) -> str:
    found = next((f for f in ("--spec-draft-n-max", "--draft-max", "--draft") if help_has(help_text, f)), None)
    if found is None:
        raise CompareError(f"{name} --help lists no draft-length flag; unsupported llama.cpp version")
    return found


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


def spec_types(help_text: str) -> set[str]:
    """The speculative types a build's ``--help`` lists on its ``--spec-type`` line."""
    m = re.search(r"--spec-type\s+([A-Za-z0-9_,-]+)", help_text)
    return set(m.group(1).split(",")) if m else set()
