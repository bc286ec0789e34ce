"""``bench``'s command: plain and speculative decoding measured on this machine, or instead
``--pairs`` (every target/draft pair), ``--concurrency`` (clients at once) or ``--against
llama.cpp DIR`` (the same runs beside llama.cpp's own binaries: ``bench.compare``).  Only
the command line's modules import this one."""

from __future__ import annotations

from .. import flags
from ... import config
from ...bench.workloads import agent as agent_workload
from ...config import DraftParams, ModelParams, ReasoningParams, SamplingParams
from ...errors import UserError
from .commands import _constraint_args, _load, _note

_BENCH_METHODS = "none,chain,specinfer,rrs,resispec,auto"
_BENCH_TOKENS = 128
_BENCH_TOKENS_HELP = (f"maximum tokens per reply, for every item (default: {_BENCH_TOKENS}; the agent workload's "
                      f"items, run by bench alone, ask their own: {agent_workload.EDIT_TOKENS} for a whole edited file, "
                      f"{agent_workload.EXTRACT_TOKENS} for an extraction)")
# bench's flags that only --against reads: (flag, namespace attribute)
AGAINST_ONLY = (("--chain-depth", "chain_depth"), ("--draft-max", "draft_max"),
                ("--spec-rows", "spec_rows"), ("--no-spec-simple", "no_spec_simple"), ("--rounds", "rounds"),
                ("--bench-reps", "bench_reps"), ("--llama-backend-sampling", "llama_backend_sampling"),
                ("--timeout", "timeout"))
# the model settings --against gives both sides (llama.cpp's commands take no others)
_AGAINST_MODEL = ("target", "draft", "n_ctx", "n_threads")


def _cmd_bench(args) -> int:
    from ...bench import inputs, measure, report

    if args.against is not None:
        return _bench_against(args)
    given = [flag for flag, dest in AGAINST_ONLY if getattr(args, dest) not in (None, False)]
    if given:
        raise UserError(f"{given[0]} applies with --against only")
    if args.sweep is not None and args.methods is not None:
        raise UserError("give --sweep or --methods, not both")
    if args.pairs or args.reference is not None:
        return _bench_pairs(args)
    if args.concurrency is not None:
        return _bench_concurrency(args)
    methods = inputs.parse_methods(args.methods or _BENCH_METHODS)
    prompts, sp = _bench_inputs(args)
    model = flags.from_args(ModelParams, args)
    dp = flags.from_args(DraftParams, args)
    schema = _constraint_args(args).get("json_schema")
    if args.plot:  # before the run, not after minutes of it
        report.require_pyplot()
    reasoning = flags.from_args(ReasoningParams, args)
    with _load(model, announce=True) as engine:
        measure.bench_command(engine, model, prompts, methods, args.temperature, sp, dp, repeat=args.repeat,
                            json_path=args.json, plot_path=args.plot, json_schema=schema, sweep=args.sweep,
                            reasoning=reasoning)
    return 0


def _bench_inputs(args):
    """bench's ``(workloads, SamplingParams)``: ``-n`` for every item when given, else
    ``_BENCH_TOKENS`` for the items that do not ask their own."""
    from ...bench import inputs

    prompts = inputs.select_prompts(args.prompts, args.workload)
    if args.n_prompts is not None:  # a quick try: the first N of each workload
        prompts = {name: items[:args.n_prompts] for name, items in prompts.items()}
    if args.max_tokens is not None:
        prompts = inputs.without_max_tokens(prompts)
    sp = flags.from_args(SamplingParams, args, temperature=args.temperature[0],
                         max_tokens=args.max_tokens or _BENCH_TOKENS)
    return prompts, sp


def _bench_pairs(args) -> int:
    from ...bench import pairs, report
    from ...llama import buildcheck

    if not args.pairs:
        raise UserError("--reference needs --pairs")
    given = [flag for flag, value in (("--methods", args.methods), ("--sweep", args.sweep),
                                      ("--concurrency", args.concurrency), ("--json-schema", args.json_schema))
             if value is not None]
    if given:
        raise UserError(f"--pairs runs plain and auto per pair: no {given[0]}")
    prompts, sp = _bench_inputs(args)
    model = flags.from_args(ModelParams, args)
    dp = flags.from_args(DraftParams, args)
    if args.plot:  # before the run, not after minutes of it
        report.require_pyplot()
    buildcheck.require_working_build(note=lambda line: _note(f"note: {line}"))
    pairs.pairs_command(model, prompts, args.temperature, sp, dp, repeat=args.repeat, reference=args.reference,
                        json_path=args.json, plot_path=args.plot, reasoning=flags.from_args(ReasoningParams, args))
    return 0


def _bench_concurrency(args) -> int:
    from ...bench import concurrency, inputs

    if args.sweep is not None or args.plot or args.json_schema is not None:
        raise UserError("--concurrency runs --methods only: no --sweep, --plot or --json-schema")
    levels = args.concurrency
    methods = inputs.parse_methods(args.methods or "none,auto")
    model = flags.from_args(ModelParams, args)
    model = model.replace(n_slots=max(model.n_slots, max(levels)))
    prompts, sp = _bench_inputs(args)
    dp = flags.from_args(DraftParams, args)
    reasoning = flags.from_args(ReasoningParams, args)
    with _load(model, announce=True) as engine:
        rows = concurrency.run_concurrency(engine, prompts, levels, methods, sp, dp, reasoning)
    concurrency.report_concurrency(rows, levels, model, json_path=args.json)
    return 0


def _bench_against(args) -> int:
    """``--against llama.cpp DIR`` (the parser checked its first value): the comparison of
    ``bench.compare`` with bench's flags, after refusing those it does not read."""
    from ...bench.compare import common, runner
    from ...llama import buildcheck

    given = [flag for flag, value in (("--sweep", args.sweep is not None), ("--pairs", args.pairs),
                                      ("--reference", args.reference is not None), ("--plot", args.plot is not None),
                                      ("--json-schema", args.json_schema is not None), ("--repeat", args.repeat != 1))
             if value]
    unread = given + _unread_settings(args)
    if unread:
        raise UserError(f"--against runs llama.cpp and ours with the same settings: no {unread[0]}")
    defaults = common.Options(llama_cpp_bin=args.against[1])
    options = common.Options(
        llama_cpp_bin=args.against[1], target=args.target, draft=args.draft, workload=args.workload,
        prompts=args.prompts, n_prompts=args.n_prompts, temperature=list(args.temperature),
        max_tokens=args.max_tokens, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p, threads=args.n_threads,
        ctx=args.n_ctx, seed=args.seed, methods=args.methods, concurrency=args.concurrency, json=args.json,
        draft_max=args.draft_max, spec_rows=args.spec_rows, no_spec_simple=args.no_spec_simple,
        llama_backend_sampling=args.llama_backend_sampling,
        **{name: getattr(args, name) if getattr(args, name) is not None else getattr(defaults, name)
           for name in ("chain_depth", "rounds", "bench_reps", "timeout")})
    return runner.run(options, prepare=lambda: buildcheck.require_working_build(
        note=lambda line: _note(f"note: {line}")))


def _unread_settings(args) -> list[str]:
    """The flags of settings given away from their defaults that ``--against`` does not pass
    on (e.g. ``-ngl``, ``--depth``, ``--reasoning-budget``): llama.cpp would not get them."""
    out = []
    for cls, kept in ((ModelParams, _AGAINST_MODEL), (DraftParams, ()), (ReasoningParams, ())):
        given, default = flags.from_args(cls, args), cls()
        for f in config.settings(cls):
            if f.name not in kept and getattr(given, f.name) != getattr(default, f.name):
                out.append(next((x for x in f.metadata["flags"] if x.startswith("--")), f.metadata["flags"][0]))
    return out
