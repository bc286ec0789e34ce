"""What users run: the command line (the ``cli`` package, its flags made from ``config`` by
``flags``), the terminal ``chat``, the OpenAI-compatible ``server`` (``fields``: request bodies into
requests; ``worker``: the job queue and cancellation; ``app``: routes and SSE; ``errors``:
exceptions into responses), the OpenAI-shaped Python function ``api.create_chat_completion``,
benchmarks (``bench`` with its ``workloads``, whose prompts are data in ``workloads.json``;
``compare``: ``bench --against llama.cpp DIR``, the same runs beside llama.cpp's binaries)
and stats rendering (``display``), and ``doctor``, the one-screen report of the build and
the machine.  ``shapes`` (response objects), ``chunks`` (one streamed
chunk sequence for ``api`` and the server) and ``logprobs`` are shared by them.

Surfaces use the ``Engine``'s public API and ``assist``; never the models behind the engine.
Nothing imports a surface but another surface (and the package's public names, re-exported
in ``resispec_gguf/__init__``); nothing imports the command line.
"""
