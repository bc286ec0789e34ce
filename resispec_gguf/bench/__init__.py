"""Benchmarks: measure decoding methods on the user's own models and machine.

``measure`` runs ``bench`` (every method on the same prompts and seeds, interleaved, each
run started cold; ``--sweep``'s grid) and ``analyze``; ``pairs`` compares target/draft pairs
(``bench --pairs``); ``concurrency`` runs several clients at once on one engine; ``compare``
puts the same runs beside llama.cpp's own binaries (``bench --against llama.cpp DIR``).
``inputs`` reads prompt files and workloads into items and plans them; ``workloads`` is the
registry of the built-in workloads, one module per kind; ``tables`` and ``report`` turn the
results into tables and into the JSON report and plot.

A layer above the engine, beside the surfaces: it may import the settings (``config``,
``errors``, ``paths``, ``progress``), the ``Engine``'s public API, ``assist`` (chat plans),
``kernels``, ``decoding`` and ``llama`` (``loading``, ``models``, ``presets``); it never
imports a surface.  The surfaces (the command line's ``bench`` and ``analyze``, ``display``)
import it; nothing below them does.
"""
