"""llama.cpp: the one place that talks to llama-cpp-python.

``backend`` is the only package that imports ``llama_cpp``: it opens GGUF models and
implements ``decoding.protocol.ModelBackend`` (tree batches, KV commits, logits rows), in
modules by what changes together (``native``: ctypes and RPC; ``tokens``, ``batches``, ``kv``,
``model``).  Around it, in plain Python: ``forest`` lays a step's uncommitted nodes out as KV
sequences; ``gguf_file`` checks a file's header before llama.cpp loads it; ``rpc_client``
greets ggml RPC workers and decides what a lost one ends the process with; ``ggml`` binds the
few ggml functions llama_cpp does not (on libllama's handle, which ``backend`` passes in).
``rpc`` serves this machine's devices to a remote target; ``presets`` names the pinned models
and parses model specs;
``models`` resolves and downloads model files (presets pinned by SHA-256); ``loading`` opens
the pair a ``ModelParams`` names; ``vocab`` checks that a draft can serve a target;
``llama_draft`` lends a draft to llama-cpp-python's own ``Llama``.  ``buildcheck`` asks, in a
child process, whether this llama.cpp build can load and decode a quantized model here (the
start-up crash check, its verdict cached per build); ``devices`` reads where llama.cpp put a
model's layers off its load log.

May import: ``decoding`` (the seam it implements; ``llama_draft`` uses its lookup), ``kernels``, ``config``,
``errors``, ``paths``, ``progress``.  Never ``assist`` or a surface.
"""
