"""The kernels' pure-Python path: the sampling, top-k, draw, acceptance, stage and verification
tests rerun, in a child process, with ``NUMBA_DISABLE_JIT=1``, so that the code Numba compiles
is also checked as Python (where a coverage tool can see it, and where a Python-only mistake
such as integer division would show).

The slow statistical and large-vocabulary cases are left out: interpreted, they take minutes.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FILES = ["test_masks.py", "test_sampling.py", "test_topk.py", "test_draws.py", "test_acceptance.py", "test_verify.py",
         "test_verify_candidates.py", "test_stages.py"]

SELECTION = (
    "test_masks or ((test_sampling or test_topk or test_draws) and not pair_law) or overlap_of_a_sparse_p or "
    "(test_verify and (kernel_enumeration_is_exact or zero_q_entries or rejects_bad_input "
    "or candidate_accepted_index or lookup_only_nodes)) or "
    "(test_stages and (zero_q_entries or check_dist or kernel_schedule_matches_reference))"
)

CHILD = """
import sys
import pytest
from resispec_gguf.kernels import sampling, verify
# NUMBA_DISABLE_JIT makes njit return the Python function itself
assert not hasattr(verify._verify, "py_func") and not hasattr(sampling._probs_sparse, "py_func")
sys.exit(pytest.main(sys.argv[1:]))
"""


def test_kernels_as_python():
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    args = ["-q", "-p", "no:cacheprovider", *(f"tests/kernels/{f}" for f in FILES), "-k", SELECTION]
    r = subprocess.run([sys.executable, "-c", CHILD, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    passed = re.search(r"(\d+) passed", r.stdout)
    assert passed and int(passed.group(1)) >= 40, r.stdout[-2000:]
