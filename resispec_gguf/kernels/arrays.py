"""The one array type every kernel entry takes: read-only, C-contiguous, of a fixed dtype.

Numba compiles a kernel once per argument *type*, and a NumPy array's writeable flag is part
of its type: the same ids, once from ``probs_sparse`` (read-only) and once built by a
candidate source (writable), would compile the kernel twice, the second time inside a reply.
The public wrappers pass every array through ``frozen``, so each kernel has one signature,
the one ``warmup`` compiles, whatever arrays the caller holds.

May import nothing of the package; NumPy only.
"""

from __future__ import annotations

import numpy as np

__all__ = ["frozen"]


def frozen(a, dtype) -> np.ndarray:
    """``a`` as a read-only C-contiguous array of ``dtype``: ``a`` itself when it is one, a
    read-only view when it is only writable, a converted copy otherwise.  Never writes
    through to the caller's array and never changes its flags."""
    a = np.ascontiguousarray(a, dtype)
    if a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a
