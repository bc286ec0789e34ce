"""llama.cpp: the one place that talks to llama-cpp-python.

``backend`` is the only module that imports ``llama_cpp``: it opens GGUF models and
implements ``spec.protocol.ModelBackend`` (tree batches, KV commits, logits rows).  ``rpc``
serves this machine's devices to a remote target; ``models`` resolves and downloads model
files (presets pinned by SHA-256); ``vocab`` checks that a draft can serve a target;
``llama_draft`` lends a draft to llama-cpp-python's own ``Llama``.

May import: ``spec`` (the seam it implements; ``llama_draft`` uses its lookup), ``kernels``, ``config``,
``errors``, ``paths``, ``progress``.  Never ``assist`` or a surface.
"""
