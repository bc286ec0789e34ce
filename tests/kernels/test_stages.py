"""The stage schedule and the input checks the verifiers share (stages.py).

1. The kernel's sorted / prefix-sum schedule (``_schedule``, read through
   ``acceptance.schedule``) gives the reference's stage rules (kernel_cases).
2. q entries equal to 0 change neither the sorted support's schedule nor the optimum.
3. ``_check_dist`` renormalises a distribution within 1e-6 of summing to 1, and every
   validating path of the verifier stays exact with it.
"""

import numpy as np
import pytest

from resispec_gguf.kernels import acceptance, stages, verify
from resispec_gguf.kernels.acceptance import expected_acceptance, optimal_acceptance, schedule
from resispec_gguf.kernels.verify import verify_checked

from kernel_cases import (
    CASES,
    IID,
    ZERO_Q_CASES,
    candidate_distribution,
    kernel_distribution,
    ref_resispec_rules,
    ref_specinfer_rules,
)


# --------------------------------------------------------------------------- schedule


@pytest.mark.parametrize("method", ("specinfer", "resispec"))
def test_kernel_schedule_matches_reference(method):
    """The kernel's sorted/prefix-sum schedule gives the reference's stage rules."""
    ref = ref_specinfer_rules if method == "specinfer" else ref_resispec_rules
    for name, p, q, k in CASES:
        if expected_acceptance(method, p, q, k) > 1 - 1e-9:
            continue  # every candidate is accepted: the schedule is not unique, both are exact
        lo, reach, c = schedule(method, p, q, k)
        rules, _ = ref(p, q, k)
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(q > 0, p / q, 0.0)
        for i in range(k):
            if reach[i] <= 1e-12:
                continue
            a = np.where(q > 0, np.clip((r - lo[i]) / reach[i], 0, 1), 0)
            assert np.abs(a - rules[i]).max() <= 1e-9, (method, name, i)


def test_zero_q_entries_leave_schedule_and_optimum_unchanged():
    for name, p, q, k, qids, qp in ZERO_Q_CASES:
        plain = stages._sorted_support(p, np.flatnonzero(q), q[q > 0])
        padded = stages._sorted_support(p, qids, qp)
        assert np.isinf(padded[0][-int((qp == 0).sum()):]).all(), name
        for code in (stages._SPECINFER, stages._RESISPEC):
            for a, b in zip(stages._schedule(code, *plain, k), stages._schedule(code, *padded, k)):
                assert np.allclose(a, b, rtol=0, atol=1e-15), (name, code)
        assert abs(acceptance._optimal(*plain, k) - acceptance._optimal(*padded, k)) <= 1e-15, name
        assert abs(acceptance._optimal(*padded, k) - optimal_acceptance(p, q, k)) <= 1e-15, name


# --------------------------------------------------------------------------- input checks


def test_check_dist_renormalises():
    p = np.array([0.1, 0.2, 0.3, 0.4]) * (1 + 5e-7)  # accepted: |sum - 1| <= 1e-6
    q = np.array([0.4, 0.3, 0.2, 0.1]) * (1 - 4e-7)
    p_n, q_n = p / p.sum(), q / q.sum()
    assert np.abs(stages._check_dist("p", p) - p_n).max() <= 1e-16
    qids = np.arange(4)
    for method in IID + ("rrs",):
        k = 1 if method == "chain" else 2
        runs = {
            "verify_checked dense q": lambda d, u: verify_checked(method, p, q, d, u),
            "verify_checked sparse q": lambda d, u: verify.verify_checked(method, p, (qids, q), d, u),
        }
        for path, run in runs.items():
            err = np.abs(kernel_distribution(method, p_n, q_n, k, run=run) - p_n).max()
            assert err <= 1e-12, (method, path, err)

        def run(d, u):
            return verify.verify_checked(method, p, (qids, q), d, u, x0=2)

        err = np.abs(candidate_distribution(method, p_n, 2, q_n, k, run=run) - p_n).max()
        assert err <= 1e-12, (method, "verify_checked with x0", err)
