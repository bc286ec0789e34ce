"""Kernels: Numba-compiled functions on plain arrays and scalars.

``sampling`` turns logits rows into distributions, on the candidates ``topk`` finds in one
read of a row; ``draws`` draws from them, ``masks`` applies a constraint's token mask.
``verify`` holds every verification rule (chain, specinfer, rrs, resispec, greedy) on the
stage schedule in ``stages``; ``acceptance`` computes the exact acceptance figures ``auto``
learns from.  ``suffix_trie`` is the suffix index's trie (``decoding.suffix_index``: insert, remove, cursor
walks, top-k).  ``sampling`` and ``verify`` re-export the names that moved out of them.
``warmup`` compiles (or loads from cache) every entry a generation calls, each with the one
array type ``arrays.frozen`` gives every entry; ``cache`` says where Numba keeps them.

May import: ``config`` (method names), ``errors``, ``paths``, ``progress``.  Never the model side
(``llama``), the decoding loop (``decoding``), assistant features (``assist``) or a surface.
Randomness comes in as uniforms drawn by the caller.
"""

from . import cache

cache.configure()  # before any kernel module imports numba: see cache.py
