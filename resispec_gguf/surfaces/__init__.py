"""What users run: the command line (``cli``, its flags from ``config`` in ``flags``), the
terminal chat, the OpenAI-compatible server, the OpenAI-shaped Python functions (``api``),
benchmarks (``bench`` with its ``workloads``) and stats rendering (``display``).

Surfaces use the ``Engine``'s public API and ``assist``; never the models behind the engine.
Nothing imports a surface but another surface (and the package's public names, re-exported
in ``resispec_gguf/__init__``); nothing imports the command line.
"""
