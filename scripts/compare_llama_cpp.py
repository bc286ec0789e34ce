"""Kept for the commands written before ``bench --against``: ``python scripts/compare_llama_cpp.py
--llama-cpp-bin DIR [options]`` runs ``python -m resispec_gguf bench --against llama.cpp DIR
[options]``, whose flags are this script's old ones under the same names (see docs/cli.md,
and ``resispec_gguf.bench.compare`` for what the comparison runs).

    python scripts/compare_llama_cpp.py --llama-cpp-bin /tmp/llama-build/bin --threads 2 --max-tokens 64
"""

from __future__ import annotations

import sys


def bench_argv(argv: list[str]) -> list[str]:
    """``argv`` with ``--llama-cpp-bin DIR`` (or ``--llama-cpp-bin=DIR``) as ``--against
    llama.cpp DIR``, after ``bench``."""
    out, rest = ["bench"], list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--llama-cpp-bin" and rest:
            out += ["--against", "llama.cpp", rest.pop(0)]
        elif arg.startswith("--llama-cpp-bin="):
            out += ["--against", "llama.cpp", arg.split("=", 1)[1]]
        else:
            out.append(arg)
    return out


def main(argv=None) -> int:
    from resispec_gguf.surfaces.cli import main as cli_main

    return cli_main(bench_argv(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
