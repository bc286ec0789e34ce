"""``bench --against llama.cpp DIR``: our speculative decoding beside llama.cpp's own tools, on the
same machine in the same run.

``DIR`` holds llama.cpp's ``llama-speculative-simple``, ``llama-bench`` and
``llama-server`` binaries (built by the user, ideally from the llama.cpp version that
llama-cpp-python vendors); the comparison for every temperature and prompt runs, interleaved:

* ``llama-speculative-simple`` on the same target/draft pair, prompt text, temperature,
  sampling filters, seed, context and threads; its printed decode speed and draft acceptance
  are parsed from its log;
* ``llama-bench -p 0 -n N -d 0,P`` on the target: llama.cpp's plain token-generation speed
  with an empty KV cache and with P tokens in it, P the prompt's length, which is the depth
  where every system here decodes (llama.cpp's tg speed falls as the cache fills);
* ``llama-server`` (one slot, no draft, started once on a free local port) answering
  ``/completion`` with the prompt as the same token ids, the same sampling settings and
  seed: llama.cpp's plain decoding with sampling on; its ``timings.predicted_per_second``;
* our engine, in this process, once per ``--methods`` entry on the same prompt tokens.

and prints one table per workload (``--workload``: the built-in code, edit and chat sets;
``--n-prompts`` keeps the first N of each): tokens/s median over prompts, the median
per-prompt ratio to our ``none`` (plain decoding through llama-cpp-python), to llama-bench's
tg speed at the prompt's depth and to llama-server, and the draft acceptance; then one line
per table with our ``none`` against llama.cpp's plain decoding.  Decode speeds exclude prompt
processing everywhere.

``--concurrency 1,4`` compares serving instead: at each level c, c client threads share a
workload's prompts (client i takes prompts i, i + c, ...) and send them back to back, to our
engine with ``max(levels)`` slots (exactly ``bench --concurrency``, per method: ``none`` and
``auto`` by default) and, interleaved, streamed over HTTP to ``llama-server -np max(levels)``
(unified KV cache, ``--ctx`` tokens per slot) without and with its draft model (one server per
``--draft-max``).  It prints the aggregate tokens/s (all tokens over the level's wall time),
its ratio to our ``none`` at the same level, the mean per-request tokens/s, and the time to
first token and end-to-end time as the client sees them, p50 and p95; ``--rounds R`` repeats
the interleaved levels (odd rounds in reverse order) and reports medians.  Both sides keep
their prompt caches as by default (llama-server keeps finished prompts in a RAM cache and
restores them into any slot, ours reuses a slot's cached prefix), and before the rounds every
system serves the workload once, untimed, at the top level: so no system finds the prompts
cold because it happened to run first, and the time to first token mostly measures queueing
and a cached prefill.

``--workload agent`` compares a coding agent's tool loop instead (``agent``): the
``bench`` agent workload's chat requests (tools, a source file in a tool result, a
``write_file`` call or JSON as the answer) sent in order over ``/v1/chat/completions`` to a
fresh ``llama-server`` per speculative type (``none``, ``draft-simple``, ``ngram-mod``,
``draft-simple,ngram-mod``, and ``ngram-cache`` where the build has it), and run by our
engine one method's whole sequence at a time, started cold as a fresh server; the table gives
prompt and decode seconds and end-to-end tokens/s, which long agent prompts dominate.

Chat prompts are rendered to text with our engine's chat template and passed to
speculative-simple with ``-p`` verbatim (it applies no template of its own; special tokens in
the text are parsed).  llama.cpp's speculative decoding drafts greedily (the draft's top token)
and accepts a draft token when the target's own sampler picks the same token, so its
acceptance at T > 0 is lower than a rejection-sampling rule's and is not comparable draw for
draw with ours; its numbers are reported as it prints them.  Its output, like ours, follows
the target's sampler exactly: the draft only changes the speed.

llama.cpp runs with its own defaults except where a flag above sets the same value for every
system, and one switch: the draft's "backend sampling" (on by default in recent builds) is
turned off, because on a CPU-only build it made speculative-simple about 20x slower here
(0.18 vs 3.6 tokens/s); ``--llama-backend-sampling`` keeps it on.  Flag names are read from
each binary's ``--help`` (they moved across llama.cpp versions).

    python -m resispec_gguf bench --against llama.cpp /tmp/llama-build/bin \\
        [--target default] [--draft ...] [--workload code,edit,chat | agent | --prompts FILE.jsonl] \\
        [--n-prompts N] [--temperature 1.0 0.6] [--chain-depth 5] \\
        [--max-tokens 128] [--threads N] [--ctx 4096] [--seed 0] [--draft-max N [N ...]] \\
        [--methods none,resispec,auto] [--no-spec-simple] [--concurrency 1,4 [--rounds R]] [--json OUT]

Errors (missing directory or binaries, a binary failing, a server not starting or refusing a
request, a bad model or argument) print one line and exit with code 2; a started server is
always stopped.

The modules: ``common`` (the options, the errors, the helpers every mode shares),
``binaries`` (the three binaries, their flags read from ``--help``, the parsers of their
output), ``server_client`` (a ``llama-server`` process and its requests), ``runner`` (the
one-request-at-a-time mode, its table, and ``run``, which picks the mode), ``concurrency``
(``--concurrency``) and ``agent`` (``--workload agent``).  They import the standard library,
the settings (``config``, ``errors``), ``llama.models`` (to resolve the model specs into the
files llama.cpp opens), the ``Engine``'s public API and the benchmark modules ``inputs``,
``measure`` and ``concurrency``, whose prompts, runs and client threads they reuse (a
sequential workload, ``workloads.Workload.sequential``, runs in the agent mode, alone);
the heavy ones only inside the
functions that run, so that ``common`` stays cheap for the command line's parser.  Only the
command line imports this package.
"""
