"""The docs cannot drift: ``docs/cli.md``'s command reference is what the parsers generate
(``scripts/gen_cli_doc.py``), whatever machine renders it; every relative link of README.md
and docs/*.md reaches a file of the repository and, with a ``#fragment``, a heading of that
page (GitHub's anchors); and the README's test command is the one CI runs."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
gen = load_script("gen_cli_doc")


# ---------------------------------------------------------------------- the CLI reference


def _region(text: str) -> str:
    start, end = text.index(gen.BEGIN), text.index(gen.END)
    return text[start:end + len(gen.END) + 1]


def test_the_cli_reference_is_what_the_parsers_generate():
    page = gen.DOC.read_text(encoding="utf-8")
    assert gen.BEGIN in page and gen.END in page, "docs/cli.md lost its generated region's markers"
    assert gen.splice(page, gen.render()) == page, f"docs/cli.md is out of date: run {gen.COMMAND}"


def test_the_reference_names_every_command_and_flag():
    from resispec_gguf.surfaces.cli import build_parser

    region = _region(gen.DOC.read_text(encoding="utf-8"))

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    assert f"### {' '.join(path + [name])}\n" in region, path + [name]
                    walk(sub, path + [name])
            elif not isinstance(action, argparse._HelpAction):
                for flag in action.option_strings or [action.dest]:
                    assert f"`{flag}`" in region, (path, flag)

    walk(build_parser(), [])


def _render_elsewhere(tmp: Path, columns: str, cpus: int) -> str:
    """The region as a fresh interpreter renders it with another terminal width, CPU count,
    home and working directory."""
    prelude = (f"import os, runpy, sys; os.cpu_count = lambda: {cpus}; "
               f"os.sched_getaffinity = lambda pid: set(range({cpus})); "
               f"sys.argv = ['gen_cli_doc.py', '--stdout']; "
               f"runpy.run_path({str(ROOT / 'scripts' / 'gen_cli_doc.py')!r}, run_name='__main__')")
    env = {**os.environ, "COLUMNS": columns, "HOME": str(tmp), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", prelude], cwd=tmp, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_reference_does_not_depend_on_the_machine(tmp_path):
    narrow, wide = tmp_path / "a", tmp_path / "b"
    narrow.mkdir()
    wide.mkdir()
    first = _render_elsewhere(narrow, "40", 3)
    assert first == _render_elsewhere(wide, "300", 97) == gen.render()


def test_a_default_naming_this_machine_is_refused():
    p = argparse.ArgumentParser(prog="x")
    sub = p.add_subparsers(dest="command")
    sub.add_parser("run", help="runs").add_argument("--cache", default=str(Path.home() / "cache"), help="a folder")
    with pytest.raises(SystemExit, match="home directory"):
        gen.render(p)


def test_the_generator_rewrites_only_its_region():
    page = f"intro\n\n{gen.BEGIN}\nold\n{gen.END}\n\nafter\n"
    assert gen.splice(page, f"{gen.BEGIN}\nnew\n{gen.END}\n") == f"intro\n\n{gen.BEGIN}\nnew\n{gen.END}\n\nafter\n"
    with pytest.raises(SystemExit, match="marker"):
        gen.splice("no markers here\n", "x")


def test_a_help_text_default_becomes_the_default_column():
    p = argparse.ArgumentParser(prog="x")
    sub = p.add_subparsers(dest="command")
    run = sub.add_parser("run", help="runs a thing")
    run.add_argument("--depth", type=int, default=5, help="tree depth (default: 5; auto: up to 16)")
    run.add_argument("--origin", action="append", help="an origin (repeatable; default: none)")
    run.add_argument("--json", help="write a report")
    run.add_argument("--mode", choices=("a", "b"), default="a", help="the mode")
    run.add_argument("--fast", action="store_true", help="go fast")
    run.add_argument("--lookup", action=argparse.BooleanOptionalAction, default=False,
                     help="look up (default: off) (default: %(default)s)")  # as Python 3.10 writes it
    text = gen.render(p)
    assert "| `--depth` | `DEPTH` | 5; auto: up to 16 | tree depth |" in text
    assert "| `--origin` | `ORIGIN` | none | an origin (repeatable) |" in text
    assert "| `--json` | `JSON` | – | write a report |" in text
    assert "| `--mode` | `a` \\| `b` | a | the mode |" in text
    assert "| `--fast` |  | off | go fast |" in text
    assert "| `--lookup`, `--no-lookup` |  | off | look up |" in text
    assert "### run\n\nRuns a thing.\n\n```\npython -m resispec_gguf run [OPTIONS]\n```" in text


# ---------------------------------------------------------------------- links and anchors


_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans (links there are not links)."""
    text = _FENCE.sub("", text)
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", text, flags=re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: its rendered text lower-cased, every character
    but letters, digits, marks, ``_``, ``-`` and spaces dropped, spaces turned into ``-``."""
    text = _LINK.sub(lambda m: m.group(1), heading).lower()
    kept = [c for c in text if c.isalnum() or c in "_- " or unicodedata.category(c).startswith("M")]
    return "".join(kept).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a page, a repeated one numbered ``-1``, ``-2``... as GitHub does."""
    seen: dict[str, int] = {}
    out = set()
    for match in re.finditer(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", _FENCE.sub("", text), re.M):
        base = slug(match.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_slugs_follow_githubs_rules():
    assert slug("Against llama.cpp on the same machine") == "against-llamacpp-on-the-same-machine"
    assert slug("Benchmarking quantized pairs: `bench --pairs`") == "benchmarking-quantized-pairs-bench---pairs"
    assert slug("`/v1/responses` (OpenAI Responses)") == "v1responses-openai-responses"
    assert slug("KV operations, uniforms and the tree") == "kv-operations-uniforms-and-the-tree"
    assert slug("Why [the rule](x.md) holds — τ ≥ 1") == "why-the-rule-holds--τ--1"
    assert anchors("# A\n## A\n```\n# A\n```\n### A\n") == {"a", "a-1", "a-2"}


def _links(page: Path):
    for match in _LINK.finditer(_prose(page.read_text(encoding="utf-8"))):
        yield match.group(2)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for target in _links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if ROOT not in dest.parents and dest != ROOT:
            broken.append(f"{target}: outside the repository")
        elif not dest.exists():
            broken.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest.read_text(encoding="utf-8")):
            broken.append(f"{target}: no heading #{fragment} in {dest.relative_to(ROOT).as_posix()}")
    assert broken == []


def test_the_docs_never_point_to_the_shared_folder():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        assert "../shared" not in text and "/work/shared" not in text, page


def test_the_readme_links_every_docs_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = {t.partition("#")[0] for t in _links(ROOT / "README.md")}
    missing = [p.name for p in PAGES[1:] if f"docs/{p.name}" not in linked]
    assert missing == [] and len(readme.splitlines()) <= 250, missing


def test_ci_runs_the_readmes_test_command():
    command = "pip install -e '.[test]' && python -m pytest -q"
    assert command in (ROOT / "README.md").read_text(encoding="utf-8")
    ci = [line for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines() if line.strip()]
    assert ci[-1] == command
