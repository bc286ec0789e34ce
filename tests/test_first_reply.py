"""The first reply after install is like the next: nothing compiles inside a generation, the
kernels cache lands in the user's cache when the install is read-only, and the stats say
what they mean (τ counts the token that ended a reply, acceptance is "-" without
speculation).  No timing thresholds: compilation shows as a Numba dispatcher gaining a
signature."""

from __future__ import annotations

import io
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

from fake_models import MarkovModel
from resispec_gguf.kernels import cache as kernel_cache
from resispec_gguf.surfaces.shapes import stats_dict
from resispec_gguf.config import DraftParams, SamplingParams
from resispec_gguf.surfaces.display import stats_line, stats_report
from resispec_gguf.engine import Engine, Result, Stats

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "resispec_gguf"

# --------------------------------------------------------------------------- no compile in a reply

# Run in a fresh interpreter: in this one, earlier tests may have compiled the very signature a
# missing warm-up would leave to the first reply.
_SIGNATURES_CHILD = textwrap.dedent("""
    import importlib, json, pkgutil, sys
    sys.path.insert(0, sys.argv[3])
    import numpy as np
    from numba.core.dispatcher import Dispatcher
    import resispec_gguf
    from resispec_gguf.config import DraftParams, SamplingParams
    from resispec_gguf.engine import Engine
    from fake_models import MarkovModel, random_rows

    # every kernel in the package, found by scanning its modules (a new kernel is covered)
    kernels = {}
    for info in pkgutil.walk_packages(resispec_gguf.__path__, "resispec_gguf."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, Dispatcher) and value.__module__ == module.__name__:
                kernels[module.__name__ + "." + name] = value

    def signatures():
        return {name: sorted(map(str, d.signatures)) for name, d in kernels.items()}

    SAMPLING = [SamplingParams(temperature=0.0), SamplingParams(),  # greedy; the default filters
                SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)]  # a plain softmax
    DRAFTS = [DraftParams(method=m, lookup=look) for m in ("none", "chain", "specinfer", "rrs", "resispec", "auto")
              for look in (False, True)] + [DraftParams(method="auto", policy="static")]

    def run(engine, prompt, max_tokens):
        for sp in SAMPLING:
            for dp in DRAFTS:
                if engine.has_draft or dp.method in ("none", "auto") or dp.lookup:
                    engine.generate(prompt, sp.replace(max_tokens=max_tokens, seed=1), dp)

    report = {"kernels": sorted(kernels)}
    engine = Engine.load(sys.argv[1], sys.argv[2], n_ctx=512, n_threads=1, flash_attn=False, progress=False)
    after_load = signatures()
    run(engine, "def f(x): return x + x + x", 24)
    engine.close()
    with Engine.load(sys.argv[1], "", n_ctx=512, n_threads=1, flash_attn=False, progress=False) as lone:
        run(lone, "abc abc abc abc", 24)  # no draft: lookup trees only
    report["tiny"] = {k: v for k, v in signatures().items() if v != after_load[k]}

    # Markov fakes give writable or read-only float32 rows of a tiny vocabulary
    rows = random_rows(6, 1, seed=0)
    writable = {ctx: r.copy() for ctx, r in rows.items()}
    fake = Engine(MarkovModel(writable, 6, eog=(5,), name="t"), MarkovModel(rows, 6, eog=(5,), name="d"))
    fake.prepare()
    after_prepare = signatures()
    run(fake, [1, 2, 3, 1, 2], 16)
    report["fakes"] = {k: v for k, v in signatures().items() if v != after_prepare[k]}
    print(json.dumps(report))
""")


@pytest.mark.parametrize("start", ["first start", "later start"])
def test_no_kernel_compiles_inside_a_generation(tiny_pair, tmp_path_factory, start):
    """A first start measures auto's costs (which runs some kernels); a later start reads
    them from the disk cache, so the warm-up alone must cover every kernel."""
    costs = tmp_path_factory.getbasetemp() / "signature-costs.json"
    assert costs.exists() == (start == "later start")
    env = {**os.environ, "RESISPEC_COSTS": str(costs)}
    r = subprocess.run([sys.executable, "-c", _SIGNATURES_CHILD, str(tiny_pair[0]), str(tiny_pair[1]), str(TESTS)],
                       cwd=PACKAGE.parent, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert {"resispec_gguf.kernels.sampling._probs_sparse", "resispec_gguf.kernels.verify._verify"} <= set(report["kernels"])
    assert report["tiny"] == {}, "compiled inside a generation after Engine.load"
    assert report["fakes"] == {}, "compiled inside a generation after Engine.prepare"


def test_prepare_measures_what_auto_needs(tiny_pair):
    with Engine.load(str(tiny_pair[0]), str(tiny_pair[1]), n_ctx=256, n_threads=1, progress=False) as e:
        assert e.costs.measured is not None and e.costs.measured[1] is not None and e.costs.row_s is not None
        curves, row_s = e.costs.measured, e.costs.row_s
        e.generate("x", SamplingParams(max_tokens=4, seed=0), DraftParams(method="auto"))
        assert e.costs.measured is curves and e.costs.row_s == row_s  # nothing measured inside a request


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("progress, terminal, shown", [(True, True, True), (True, False, False), (False, True, False)])
def test_prepare_shows_its_bar_only_on_a_terminal(monkeypatch, progress, terminal, shown):
    from resispec_gguf import progress as progress_module

    bars = []
    real = progress_module.bar
    monkeypatch.setattr(progress_module, "bar", lambda *a, **k: bars.append((a, k)) or real(*a, **k))
    monkeypatch.setattr(sys, "stderr", _Terminal() if terminal else io.StringIO())
    _counting_pair().prepare(progress=progress)
    if not progress:
        assert bars == []  # nothing drawn at all
        return
    (total, desc, show), kw = bars[0]
    assert desc == "preparing kernels" and show == shown and kw["leave"] is False  # erased when done


def test_prepare_reports_through_a_callback(monkeypatch):
    monkeypatch.setattr(sys, "stderr", _Terminal())
    seen = []
    _counting_pair().prepare(progress=lambda done, total: seen.append((done, total)))
    total = seen[0][1]
    assert total >= 4 and seen == [(i, total) for i in range(total + 1)]
    assert sys.stderr.getvalue() == ""  # the engine itself draws nothing


# --------------------------------------------------------------------------- the kernels cache


def test_numba_cache_dir_choice(tmp_path):
    user = lambda: tmp_path / "user"  # noqa: E731
    writable = tmp_path / "pkg"
    assert kernel_cache.cache_dir_for(writable, {}, user) is None  # numba's own __pycache__
    blocked = tmp_path / "a-file"  # __pycache__ cannot be made under a file, even by root
    blocked.write_text("")
    assert kernel_cache.cache_dir_for(blocked, {}, user) == tmp_path / "user" / "numba"
    assert (tmp_path / "user" / "numba").is_dir()
    assert kernel_cache.cache_dir_for(blocked, {"NUMBA_CACHE_DIR": "/elsewhere"}, user) is None
    nowhere = lambda: blocked / "sub"  # noqa: E731
    assert kernel_cache.cache_dir_for(blocked, {}, nowhere) is None  # numba falls back on its own


def _can_write(directory: Path) -> bool:
    try:
        tempfile.TemporaryFile(dir=directory).close()
    except OSError:
        return False
    return True


_NO_OVERRIDE = "-dac_override,-dac_read_search"


def _without_write_override(read_only: Path):
    """``(command prefix, subprocess.run keywords)`` that run a child for which
    ``read_only`` is read-only although this process (root) can write there: root without
    the capabilities that override file permissions (setpriv), else the user 'nobody';
    None when neither works here."""
    probe = ["sh", "-c", f"touch '{read_only}/probe' 2>/dev/null"]
    setpriv = shutil.which("setpriv")
    if setpriv:
        prefix = [setpriv, f"--inh-caps={_NO_OVERRIDE}", f"--bounding-set={_NO_OVERRIDE}", "--"]
        if subprocess.run([*prefix, *probe]).returncode != 0:  # blocked, as wanted
            return prefix, {}
    try:
        nobody = pwd.getpwnam("nobody")
        user = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
        if (subprocess.run(probe, **user).returncode != 0
                and subprocess.run([sys.executable, "-c", "pass"], **user).returncode == 0):
            return [], user
    except (KeyError, OSError):
        pass
    return None


@pytest.fixture(scope="module")
def read_only_install():
    """``(run, base)``: ``run(code, **env)`` runs ``code`` in a child Python whose
    ``resispec_gguf`` is a read-only copy of the package in ``base / "site"``, with an empty
    user cache ``base / "user"``, and returns the CompletedProcess; as an unprivileged user
    when this process is root (root writes through permissions)."""
    base = Path(tempfile.mkdtemp(prefix="resispec-ro-"))  # not pytest's 0700 tmp: the child must reach it
    site = base / "site"
    shutil.copytree(PACKAGE, site / "resispec_gguf", ignore=shutil.ignore_patterns("__pycache__"))
    for d in (base / "user", base / "home", base / "xdg"):
        d.mkdir()
        d.chmod(0o777)
    base.chmod(0o755)
    for path in [site, *site.rglob("*")]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    prefix, user = [], {}
    if _can_write(site / "resispec_gguf"):
        found = _without_write_override(site / "resispec_gguf")
        if found is None:
            shutil.rmtree(base, ignore_errors=True)
            pytest.skip("writes ignore permissions here (root), and neither setpriv nor a 'nobody' user who can "
                        "run this Python is available to run a read-only install")
        prefix, user = found

    def run(code: str, **extra_env):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "RESISPEC_", "XDG_", "PYTHON"))}
        env.update(PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1", HOME=str(base / "home"),
                   XDG_CACHE_HOME=str(base / "xdg"), RESISPEC_CACHE=str(base / "user" / "models"), **extra_env)
        r = subprocess.run([*prefix, sys.executable, "-c", code], cwd=base, env=env, capture_output=True, text=True,
                           timeout=600, **user)
        assert r.returncode == 0, r.stderr[-3000:]
        return r

    yield run, base
    for path in [site, *site.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    shutil.rmtree(base, ignore_errors=True)


_COMPILE_ONE = textwrap.dedent("""
    import numpy as np
    import resispec_gguf
    from resispec_gguf.kernels import sampling
    from numba.core import config
    assert resispec_gguf.__file__.startswith(%r), resispec_gguf.__file__  # the read-only copy
    sampling.sample_dense(np.array([0.5, 0.5]), 0.25)  # compiles one kernel and caches it
    print(config.CACHE_DIR)
""")


def test_read_only_install_caches_kernels_in_the_user_cache(read_only_install):
    run, base = read_only_install
    r = run(_COMPILE_ONE % str(base / "site"))
    wanted = base / "user" / "models" / "numba"
    assert r.stdout.strip().splitlines()[-1] == str(wanted)
    assert [p.name for p in wanted.rglob("*.nbi")], "no kernel index in the user cache"
    assert list(wanted.rglob("*_sample_dense*.nbc"))
    # neither beside the package nor in numba's own fallback (~/.cache/numba)
    assert not list((base / "site" / "resispec_gguf").rglob("__pycache__"))
    assert not list((base / "xdg").rglob("*.nbi")) and not list((base / "home").rglob("*.nbi"))


def test_read_only_install_keeps_the_users_numba_cache_dir(read_only_install):
    run, base = read_only_install
    own = str(base / "own")
    r = run("import resispec_gguf\nfrom numba.core import config\nprint(config.CACHE_DIR)", NUMBA_CACHE_DIR=own)
    assert r.stdout.strip() == own


# --------------------------------------------------------------------------- stats


def _counting_pair(draft_agrees: bool = True):
    """Order-1 fakes over 6 tokens: the target (greedily) follows each token with the next,
    4 with the end-of-generation token 5, so from [0] it says 1 2 3 4 and ends.  The draft
    agrees, or always guesses two ahead (never right)."""
    def rows(follow):
        out = {}
        for i in range(6):
            r = np.zeros(6, np.float32)
            r[follow(i)] = 8.0
            r.flags.writeable = False
            out[(i,)] = r
        return out

    target = MarkovModel(rows(lambda i: min(i + 1, 5)), 6, eog=(5,), name="t")
    draft = MarkovModel(rows(lambda i: min(i + 1, 5) if draft_agrees else (i + 2) % 6), 6, eog=(5,), name="d")
    return Engine(target, draft)


GREEDY = SamplingParams(temperature=0.0, max_tokens=50)


def test_plain_reply_has_tau_one_and_no_acceptance():
    res = _counting_pair().generate([0], GREEDY, DraftParams(method="none"))
    st = res.stats
    assert res.tokens == [1, 2, 3, 4] and res.finish_reason == "eos"
    assert (st.tokens, st.eos_tokens, st.target_calls) == (4, 1, 5)
    assert st.tau == 1.0 and st.acceptance_rate is None
    d = stats_dict(res)
    assert d["tau"] == 1.0 and d["acceptance_rate"] is None and d["eos_tokens"] == 1
    assert "tau 1.00 tokens/target call, acceptance -," in stats_line(st)
    assert "tau 1.00 " in stats_report(st) and "acceptance -" in stats_report(st)


def test_plain_reply_cut_by_length_has_tau_one():
    res = _counting_pair().generate([0], GREEDY.replace(max_tokens=2), DraftParams(method="none"))
    assert res.finish_reason == "length" and res.stats.eos_tokens == 0 and res.stats.tau == 1.0


def test_speculative_reply_counts_the_end_token():
    res = _counting_pair().generate([0], GREEDY, DraftParams(method="chain", depth=5, budget=5))
    st = res.stats
    assert res.tokens == [1, 2, 3, 4] and res.finish_reason == "eos"
    # one target call verified the draft's 1 2 3 4 EOS and produced all five tokens
    assert (st.target_calls, st.eos_tokens) == (1, 1) and st.tau == 5.0
    assert st.acceptance_rate == 1.0 and "acceptance 100%" in stats_line(st)


def test_rejected_speculation_shows_zero_acceptance_and_tau_one():
    res = _counting_pair(draft_agrees=False).generate([0], GREEDY, DraftParams(method="chain", depth=1, budget=1))
    st = res.stats
    assert res.tokens == [1, 2, 3, 4] and st.tau == 1.0
    assert st.acceptance_rate == 0.0 and "acceptance 0%" in stats_line(st)  # speculated, all rejected


def test_merged_and_empty_stats():
    plain = _counting_pair().generate([0], GREEDY, DraftParams(method="none")).stats
    spec = _counting_pair().generate([0], GREEDY, DraftParams(method="chain", depth=5, budget=5)).stats
    total = Stats()
    total.merge(plain)
    total.merge(spec)
    assert total.eos_tokens == 2 and total.tau == (8 + 2) / 6 and total.acceptance_rate == 1.0
    empty = Stats()
    assert empty.tau is None and empty.acceptance_rate is None
    assert "tau - tokens/target call, acceptance -," in stats_line(empty)
    assert stats_dict(Result([], "", "length", empty, 0))["tau"] is None


def test_tiny_model_plain_and_speculative_replies(engine):
    for method in ("none", "resispec", "auto"):
        for sp in (SamplingParams(temperature=0.0, max_tokens=40), SamplingParams(max_tokens=40, seed=3)):
            st = engine.generate("Once upon a time", sp, DraftParams(method=method)).stats
            assert st.tau >= 1.0
            assert st.tau == (st.tokens + st.eos_tokens) / st.target_calls
            if method == "none":
                assert st.tau == 1.0 and st.acceptance_rate is None and "acceptance -" in stats_line(st)
            if not sum(st.reached_by_depth):
                assert st.acceptance_rate is None
