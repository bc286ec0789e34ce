"""An OpenAI-compatible HTTP API for one loaded ``Engine`` (Starlette app, served by uvicorn).

Routes: ``GET /health``, ``GET /v1/models``, ``GET /v1/models/{id}``, ``POST /infill``,
``POST /v1/chat/completions`` and ``POST /v1/completions`` (both streaming as server-sent events
and non-streaming); Anthropic's ``POST /v1/messages`` and ``/v1/messages/count_tokens`` and
OpenAI's ``POST /v1/responses`` (``GET /v1/responses/{id}``), translated onto the chat path
(``anthropic``, ``responses``); llama.cpp's ``/tokenize``, ``/detokenize``,
``/apply-template``, ``/props`` and ``/slots`` and Prometheus' ``/metrics`` (``ops``,
``metrics``).  Every completion carries llama.cpp's ``timings``; llama.cpp's
``speculative.n_max``/``n_min``/``p_min`` map onto the draft parameters or are refused
(``fields``).  With an API key (``auth``: the setting, a key file or ``RESISPEC_API_KEY``)
every route but ``/health`` needs it.  Besides the OpenAI fields (``temperature``, ``top_p``, ``max_tokens``,
``max_completion_tokens``, ``stop``, ``seed``, ``n`` = 1, ``stream_options.include_usage``) a
request may set ``top_k`` and ``min_p`` and override the draft parameters with ``method``,
``draws``, ``depth`` and ``budget``.  Responses (and the last chunk of a stream) carry an extra
``"speculative"`` object: the generation's ``Stats.as_dict()``.  The ``model`` field is
ignored (one model is served), and so is ``user``; ``logit_bias`` is honoured; what cannot be
honoured is refused with a 400 naming it unless it asks for nothing: penalties and the other
samplers this server does not run (``samplers``), image, audio and file parts (the model
serves text only), ``n`` > 1, echo.  ``GET /health`` answers 503 ``{"status": "loading
model"}`` and the other routes 503 while the models load (``serve(load=...)``, or
``create_app(None)`` then ``attach``); ``/v1/models`` carries the model's figures (``meta``).  Chat requests may carry
``tools``/``tool_choice``/``parallel_tool_calls`` and ``response_format`` (``json_object``,
``json_schema``): ``assist.plan.plan_chat`` turns them into a prompt and a constraint, and
calls in the reply come back as ``tool_calls`` (streamed as ``delta.tool_calls``).

Input: POST bodies must be ``application/json`` (else 415), at most ``MAX_BODY_BYTES``.  A
prompt that cannot fit the context whatever its text (more UTF-8 bytes than
``engine.max_prompt_bytes``) is refused with 400 ``context_length_exceeded`` before it is
tokenized.  Message contents are tokenized as text: only the chat template's own text can
become control tokens (``Engine.chat_tokens``).  Cross-origin browser requests are refused
unless ``cors_origins`` allows the origin.

Code infill: ``/v1/completions`` with a non-empty ``suffix`` and llama.cpp's ``POST /infill``
(answered in llama.cpp's shape, ``shapes.infill_object``) fill in between a prefix and a
suffix with the model's FIM tokens (``Engine.infill_tokens``); a model without them gets a 400.

Logprobs: chat's ``logprobs``/``top_logprobs`` and completions' ``logprobs`` (0 to
``MAX_TOP_LOGPROBS`` alternatives) add the target's log-probabilities at T = 1 before filters,
shaped by ``logprobs.LogprobsFormatter``; streamed, each chunk carries its tokens' and the
finish chunk the rest.

Concurrency: one engine thread runs one generation at a time; prompts are tokenized before,
on a pool of ``TOKENIZER_THREADS`` threads.  At most ``max_queue`` requests wait behind the
running one; more get 503 with ``Retry-After``.  A client that disconnects cancels its
request at once (``worker``).

The modules: ``app`` (the app, the server object every route uses, and ``create_app``, which
registers each dialect's ``routes(srv)``), the dialects, one module each: ``openai`` (models,
chat, completions, ``/infill``), ``anthropic`` (Anthropic's Messages API) and ``responses``
(OpenAI's Responses API), each translating its bodies onto the chat path over ``dialects``
(what both write), and ``ops`` (``/health`` and llama.cpp's utility routes); ``fields``
(request bodies into requests; the per-request settings come from the settings' metadata),
``worker`` (jobs, the queue, cancellation), ``streams`` (SSE), ``errors`` (what an error
becomes on the wire), ``auth`` (the key), ``samplers`` (the sampling fields beyond the
settings) and ``metrics``.  May import ``assist``, ``config``, ``errors`` and the shapes,
chunks and logprobs surfaces; it uses only the engine's public API (``stream``, ``stream_logprobs``,
``token_piece``, ``last_result``, ``chat_tokens``, ``text_tokens``, ``max_prompt_bytes``,
``n_ctx``, ``n_vocab``, ``check_draft_params``, ``fim_tokens``, ``infill_tokens``, ``tool_format``,
``reasoning_format``, ``compile_constraint``, ``tokenize``, ``detokenize``, ``render_chat``,
``chat_template``, ``info``, ``has_draft``), never ``llama`` or the models behind the engine.
"""

from .app import MAX_BODY_BYTES, TOKENIZER_THREADS, create_app, listen, serve
from .auth import ENV_VAR as API_KEY_ENV
from .auth import api_key
from .fields import MAX_STOP_CHARS, MAX_STOP_STRINGS, MAX_TOKENS_LIMIT, MAX_TOP_LOGPROBS
from .responses import STORED_RESPONSES

__all__ = ["create_app", "serve", "listen", "api_key", "API_KEY_ENV", "MAX_BODY_BYTES", "MAX_STOP_CHARS",
           "MAX_STOP_STRINGS", "MAX_TOKENS_LIMIT", "MAX_TOP_LOGPROBS", "STORED_RESPONSES", "TOKENIZER_THREADS"]
