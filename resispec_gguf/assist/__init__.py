"""Assistant features on top of text generation.

``prompts`` builds every prompt from text (plain, a chat rendered with the model's template
by ``chat_format``, a fill-in-the-middle layout by ``fim``), tokenized so that only the
template's own text can become control tokens.  ``grammar`` is the one adapter to the grammar
engine (llguidance): JSON schemas and grammars → per-path token masks; ``schemas`` finds
where in a client's JSON schema a feature the engine cannot honour is.  ``tools`` checks
tool requests and streams replies that may call; ``formats`` holds the formats models write
calls in (one module per family: markers, grammars, parsing, rendering).  ``reasoning`` owns
a reasoning model's thinking block: its markers, the reply split into reasoning and answer,
and the constraint that lets it think before a grammar applies (``lazy.After``: a constraint
that starts after a closing marker).  ``plan`` turns a chat request (tools, tool_choice,
response_format, reasoning fields) into a prompt and a constraint; the surfaces then run it
on the engine.  ``chatmodel`` is what planning is handed of a model (``ChatModel``: the
prompts, the grammars and ``ChatFormats``, the tool format and thinking markers found once),
assist's own objects, which the engine holds and hands over.

Everything here works on a model's vocabulary and text and never calls a method of the engine
(the flow is surfaces → assist → engine, never back).  May import:
``kernels`` (bit masks), ``decoding.protocol``, ``config``, ``errors``.  Never ``llama`` (the
vocabulary comes in as an object), the engine or a surface.
"""
