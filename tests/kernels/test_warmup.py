"""The kernels' warm-up (``kernels.warmup``): every warm-up runs, and afterwards every kernel a
generation reaches has its compiled signature, so that the public entries, called with every
argument type a generation passes them, compile nothing more.

The signature checks run in a fresh interpreter: in this one, earlier tests may already have
compiled what a missing warm-up would leave to the first reply.  Compilation shows as a Numba
dispatcher gaining a signature (loading one from the disk cache counts too); no timing.
``test_first_reply`` checks the same through whole generations of the engine."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from resispec_gguf.kernels import warmup

ROOT = Path(__file__).resolve().parents[2]

_CHILD = textwrap.dedent("""
    import importlib, json, pkgutil
    import numpy as np
    from numba.core.dispatcher import Dispatcher
    import resispec_gguf.kernels as package
    from resispec_gguf.kernels import acceptance, draws, masks, sampling, verify, warmup

    kernels = {}  # every kernel of every kernel module, found by scanning (a new one is covered)
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, Dispatcher) and value.__module__ == module.__name__:
                kernels[module.__name__.rpartition(".")[2] + "." + name] = value

    def signatures():
        return {name: sorted(map(str, d.signatures)) for name, d in kernels.items()}

    report = {"before": signatures()}
    steps = warmup.warm_ups()
    for step in steps:
        step()
    report["steps"] = [step.__name__ for step in steps]
    report["warm"] = signatures()

    # what a generation passes (spec.generation, spec.autotune, spec.costs), with other values:
    # read-only float32 rows of other sizes, every filter combination, masks, logprobs, dense and
    # sparse targets, every method with and without a lookup candidate, lookup-only nodes
    def _read_only(a):
        a = a.copy()
        a.flags.writeable = False
        return a

    rng = np.random.default_rng(0)
    for V in (7, 300, 5000):
        row = rng.normal(0, 2, V).astype(np.float32)
        row[rng.random(V) < 0.1] = -np.inf
        row[0] = 1.0
        row.flags.writeable = False
        mask = masks.bitmask_from_ids(range(0, V, 2), V)
        for logits in (row, masks.mask_logits(row, mask)):
            for T, top_k, top_p, min_p in ((0.0, 40, 0.95, 0.05), (0.8, 40, 0.95, 0.05), (1.0, 0, 1.0, 0.0),
                                           (0.6, 0, 0.9, 0.0), (1.2, 5, 1.0, 0.1)):
                dense = sampling.probs_dense(logits, T, top_k, top_p, min_p)
                sparse = sampling.probs_sparse(logits, T, top_k, top_p, min_p)
                draws.sample_dense(dense, rng.random())
                draws.sample_sparse(sparse[0], sparse[1], rng.random())
                for cap in (1, 3, 64):
                    given = sampling.probs_sparse(logits, T, top_k, top_p, min_p, cap)
                    # q's ids and probabilities as ``probs_sparse`` gives them, writable (a
                    # candidate source builds new ones) or read-only (a cache keeps them so)
                    for qids, qp in (given, (given[0].copy(), given[1].copy()), (given[0], _read_only(given[1]))):
                        for k in (1, 2, 4):
                            wor = draws.sample_without_replacement(qids, qp, rng.random(k))
                            iid, _ = draws.sample_iid_q(qids, qp, rng.random(k))
                            draws.sample_iid(qids, qp, rng.random(k))
                            for p in (dense, sparse):
                                pv = acceptance.values_at(p, qids)
                                acceptance.overlap(p, qids, qp)
                                acceptance.acceptance_profile(pv, qp, np.arange(1, k + 1, dtype=np.int64))
                                acceptance.draw_chances("resispec", pv, qids, qp, iid)
                                acceptance.draw_chances("chain", pv, qids, qp, iid[:1])
                                for method in ("chain", "specinfer", "rrs", "resispec"):
                                    d = wor if method == "rrs" else iid[:1] if method == "chain" else iid
                                    verify.verify(method, p, (qids, qp), d, rng.random(len(d) + 1))
                                    verify.verify(method, p, (qids, qp), d, rng.random(len(d) + 2), int(qids[-1]))
                                    verify.verify(method, p, (qids, qp), d, rng.random(len(d) + 2), V - 1)
                                    verify.verify(method, p, None, d[:0], rng.random(2), int(rng.integers(V)))
                            verify.verify_greedy(int(np.argmax(dense)), iid)
            for n_top in (0, 1, 5, 20):
                sampling.token_logprob(logits, int(rng.integers(V)), n_top)
    report["used"] = signatures()
    print(json.dumps(report))
""")

# the kernels the Python wrappers a generation calls enter (a kernel called only by other
# kernels gets no signature of its own when its caller is loaded from the disk cache)
HOT = {
    "topk._scan_top", "topk._top_k_ids", "sampling._probs_row", "sampling._probs_sparse",
    "draws._sample_iid", "draws._sample_iid_q", "draws._sample_without_replacement", "draws._sample_dense",
    "draws._sample_by_id", "verify._verify", "verify._verify_with_candidates", "verify._verify_sparse",
    "acceptance._acceptance_profile", "acceptance._draw_chances", "acceptance._common_mins", "acceptance._values_at",
    "masks._apply_mask",
}
# kernels entered only from wrappers no generation calls (schedule, expected_acceptance,
# optimal_acceptance: the tests' and the figures' callers): no warm-up needed
COLD = {"acceptance._optimal", "stages._mass_min", "stages._schedule", "stages._sorted_support"}


def _entered_from_python() -> set[str]:
    """``module.kernel`` for every kernel a plain (not jitted) function of a kernel module
    calls, read from the source."""
    import ast
    import importlib
    import pkgutil

    from numba.core.dispatcher import Dispatcher

    import resispec_gguf.kernels as package

    out = set()
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        for node in ast.parse(Path(module.__file__).read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and not node.decorator_list:
                for sub in ast.walk(node):
                    value = getattr(module, sub.id, None) if isinstance(sub, ast.Name) else None
                    if isinstance(value, Dispatcher):
                        out.add(value.__module__.rpartition(".")[2] + "." + value.__name__)
    return out


def test_every_kernel_a_wrapper_enters_is_known_to_be_warmed_up_or_not():
    """A new entry from Python must be added to HOT (and to the warm-ups) or to COLD."""
    assert sorted(_entered_from_python()) == sorted(HOT | COLD)


@pytest.fixture(scope="module")
def child_report():
    r = subprocess.run([sys.executable, "-c", _CHILD], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_every_warm_up_runs():
    steps = warmup.warm_ups()
    assert [s.__name__ for s in steps] == ["distributions", "draws", "verification"]
    for step in steps:
        assert step() is None


def test_a_fresh_interpreter_has_compiled_nothing_before_the_warm_ups(child_report):
    assert HOT | COLD <= set(child_report["before"]), sorted((HOT | COLD) - set(child_report["before"]))
    assert {name for name, sigs in child_report["before"].items() if sigs} == set()


def test_after_the_warm_ups_every_kernel_a_generation_enters_is_compiled(child_report):
    assert child_report["steps"] == ["distributions", "draws", "verification"]
    warm = child_report["warm"]
    assert sorted(name for name in HOT if not warm[name]) == []


def test_what_a_generation_passes_compiles_nothing_more(child_report):
    warm, used = child_report["warm"], child_report["used"]
    assert {name: sigs for name, sigs in used.items() if sigs != warm[name]} == {}


def test_warm_up_rows_are_read_only_float32_as_the_backend_gives_them():
    """The warm-ups fix the logits type: a writable row is another Numba type, which would
    compile every logits kernel again (the wrappers make a read-only view of one)."""
    from resispec_gguf.kernels.sampling import _row

    writable = np.array([1.0, 0.0], np.float32)
    view = _row(writable)
    assert view.dtype == np.float32 and not view.flags.writeable and writable.flags.writeable
