"""Kernels: Numba-compiled functions on plain arrays and scalars.

``sampling`` turns logits rows into distributions and draws from them; ``verify`` holds every
verification rule (chain, specinfer, rrs, resispec, greedy) and the exact acceptance figures
``auto`` learns from; ``warmup`` compiles (or loads from cache) every entry a generation
calls; ``cache`` says where Numba keeps them.

May import: ``config`` (method names), ``errors``, ``paths``.  Never the model side
(``llama``), the decoding loop (``spec``), assistant features (``assist``) or a surface.
Randomness comes in as uniforms drawn by the caller.
"""

from . import cache

cache.configure()  # before any kernel module imports numba: see cache.py
