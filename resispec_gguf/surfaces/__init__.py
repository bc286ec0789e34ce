"""What users run: the command line (the ``cli`` package, its flags made from ``config`` by
``flags``), the terminal ``chat``, the OpenAI-compatible ``server`` (``fields``: request bodies into
requests; ``worker``: the job queue and cancellation; ``app``: routes and SSE; ``errors``:
exceptions into responses), the OpenAI-shaped Python function ``api.create_chat_completion``,
stats rendering (``display``), and ``doctor``, the one-screen report of the build and the
machine.  ``shapes`` (response objects), ``chunks`` (one streamed chunk sequence for ``api``
and the server) and ``logprobs`` are shared by them.  The benchmarks are the package
``resispec_gguf.bench``; the command line's ``bench`` and ``analyze`` turn flags into settings
and call it.

Surfaces use the ``Engine``'s public API, ``assist`` and ``bench``; never the models behind the
engine.
Nothing imports a surface but another surface (and the package's public names, re-exported
in ``resispec_gguf/__init__``); nothing imports the command line.
"""
