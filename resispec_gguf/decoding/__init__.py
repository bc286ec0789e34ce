"""Speculative decoding, independent of llama.cpp and of text formats.

A ``generation`` (one request) plans the rows it wants decoded in a step and absorbs the rows
it gets back (the messages: ``steps``): it grows the draft ``tree`` (``drafting``, with the
candidates of its ``candidates`` sources: context and memory, views, forced), verifies it with the
kernels (on ``uniforms`` from the request's seeded generator), commits and emits tokens
(``textstream`` turns them into text).  The ``loop``
owns the model calls of one request; ``batch`` steps several requests together in the slots
of a ``protocol.SlotBackend`` (one target decode for all, one draft decode per level), and
``runner`` drives a batch on a thread of its own for callers on other threads.
``promptcache`` keeps evicted prompts' states in RAM for either.  ``suffix_index`` is a
counted suffix index over many token sequences (a request's context, past answers), ``memory``
the engine's store of past answers; ``lookup`` is the n-gram index ``llama.llama_draft`` uses.
``autotune`` is ``auto``: cost curves, learnt acceptance, and the step plan (``stepplan``: its
growth rule; ``calibration``: what it believes of each candidate, in the bins the sources'
registry lays out); ``autorequest`` is its per-request face to a generation.
``protocol`` is the seam: what the loop asks of a model (``ModelBackend``) and of a
constraint (``Constraint``).

May import: ``kernels``, ``config``, ``errors``, ``paths``.  Never ``llama`` (models come in
through ``protocol``), ``assist`` (constraints come in as masks) or a surface.
"""
