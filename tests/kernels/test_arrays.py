"""``kernels.arrays.frozen``: one array type for every kernel entry, without copying what
need not be copied and without touching the caller's array."""

from __future__ import annotations

import numpy as np
import numba

from resispec_gguf.kernels.arrays import frozen


def test_a_writable_array_becomes_a_read_only_view_of_it():
    a = np.arange(5, dtype=np.int64)
    f = frozen(a, np.int64)
    assert not f.flags.writeable and a.flags.writeable  # the caller's array keeps its flag
    assert np.shares_memory(a, f)
    a[0] = 7
    assert f[0] == 7


def test_a_read_only_array_passes_as_it_is():
    a = np.arange(5, dtype=np.float64)
    a.flags.writeable = False
    assert frozen(a, np.float64) is a


def test_other_dtypes_layouts_and_lists_are_converted():
    strided = np.arange(10, dtype=np.int32)[::2]
    f = frozen(strided, np.int64)
    assert f.dtype == np.int64 and f.flags.c_contiguous and not f.flags.writeable
    assert f.tolist() == [0, 2, 4, 6, 8]
    assert frozen([0.5, 0.25], np.float64).tolist() == [0.5, 0.25]


def test_every_source_gives_the_same_numba_type():
    read_only = np.arange(3, dtype=np.int64)
    read_only.flags.writeable = False
    sources = [np.arange(3), read_only, np.arange(6)[::2], [0, 1, 2], np.arange(3, dtype=np.int32)]
    assert len({numba.typeof(frozen(s, np.int64)) for s in sources}) == 1
