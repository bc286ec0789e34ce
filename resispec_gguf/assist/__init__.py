"""Assistant features on top of text generation: chat prompts, fill-in-the-middle prompts,
constraints (JSON schemas and grammars through llguidance) and tool calls.

Everything here works on a model's vocabulary and text; it asks the engine for nothing but
what it is handed.  May import: ``kernels`` (bit masks), ``spec.protocol``, ``config``,
``errors``.  Never ``llama`` (the vocabulary comes in through the engine), the engine or a
surface.
"""
