"""The speculative engine end to end on the tiny GGUF pair.

Exactness at scale is proved on Markov fakes (test_exactness.py).  Here a smoke test checks
it through real llama.cpp models with the randomised probability integral transform: for
every generated token t at a position whose exact target distribution is p (computed by a
separate target model on the generated prefix), ``v = F(t-) + U p(t)`` is uniform on [0, 1)
exactly when t ~ p.  Over seeded runs and the first three positions, the v's are binned and
chi-square tested; the first token is also tested directly.
"""

import numpy as np
import pytest
from scipy import stats

import tiny_gguf
from resispec_gguf.kernels import sampling
from resispec_gguf.llama.backend import LlamaModel
from resispec_gguf.config import ConfigError, DraftParams, ModelParams, SamplingParams
from resispec_gguf.engine import Engine
from resispec_gguf.errors import ContextFullError, UserError

METHODS = ("none", "chain", "specinfer", "rrs", "resispec")
EOG = (tiny_gguf.EOS_ID, tiny_gguf.IM_END_ID)


@pytest.fixture(scope="module")
def noisy_engine(noisy_pair):
    with Engine.load(str(noisy_pair[0]), str(noisy_pair[1]), n_ctx=512, progress=False, n_threads=1) as e:
        yield e


@pytest.fixture(scope="module")
def reference(noisy_pair):
    """A second copy of the noisy pair's target, for exact distributions."""
    m = LlamaModel(noisy_pair[0], n_ctx=512, n_seq_max=2, flash_attn=False, n_threads=1)
    yield m
    m.close()


@pytest.fixture(scope="module")
def tiny_reference(tiny_pair):
    m = LlamaModel(tiny_pair[0], n_ctx=512, n_seq_max=2, flash_attn=False, n_threads=1)
    yield m
    m.close()


def _pit(p, tok, u):
    """Randomised PIT with all end-of-generation tokens merged into one cell placed first."""
    eog = p[list(EOG)].sum()
    if tok is None:
        return u * eog
    rest = p.copy()
    rest[list(EOG)] = 0.0
    return eog + rest[:tok].sum() + u * rest[tok]


@pytest.mark.parametrize(
    "sp",
    [
        SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=3),
        SamplingParams(temperature=0.7, top_k=20, top_p=0.9, min_p=0.0, max_tokens=3),
    ],
    ids=["T1", "T0.7-topk-topp"],
)
@pytest.mark.parametrize("method", METHODS)
def test_first_three_tokens_follow_the_target(noisy_engine, reference, method, sp):
    engine = noisy_engine
    prompt = engine.text_tokens("Once upon a time")
    dp = DraftParams(method=method, draws=3, depth=3, budget=8)
    runs = 800
    rng = np.random.default_rng(99)
    pits, first = [], []
    cache: dict[tuple, np.ndarray] = {}
    n0 = len(prompt)
    for seed in range(runs):
        res = engine.generate(prompt, sp.replace(seed=seed), dp)
        toks = list(res.tokens)
        assert len(toks) == 3 or res.finish_reason == "eos"
        seq = toks + ([None] if res.finish_reason == "eos" else [])
        key = tuple(toks[:2])
        if key not in cache:  # rows n0-1 .. : the target's logits for positions 0, 1, 2
            cache[key] = reference.logits_of_sequence(prompt + list(key))[n0 - 1 :]
        for i, tok in enumerate(seq[:3]):
            p = sampling.probs_dense(cache[key][i], sp.temperature, sp.top_k, sp.top_p, sp.min_p)
            assert tok is None or p[tok] > 0, "emitted a token outside the target's support"
            pits.append(_pit(p, tok, rng.random()))
        first.append(seq[0])
    counts, _ = np.histogram(pits, bins=20, range=(0, 1))
    assert stats.chisquare(counts).pvalue >= 1e-4
    # the first token directly
    p0 = sampling.probs_dense(reference.logits_of_sequence(prompt)[-1], sp.temperature, sp.top_k, sp.top_p, sp.min_p)
    cells = np.array([-1 if t is None else t for t in first])
    eog_p = p0[list(EOG)].sum()
    big = [t for t in np.argsort(-p0) if p0[t] * runs >= 5 and t not in EOG]
    obs = [np.sum(cells == t) for t in big]
    exp = [p0[t] * runs for t in big]
    rest_obs, rest_exp = runs - sum(obs), runs - sum(exp)
    if rest_exp >= 5:
        obs.append(rest_obs)
        exp.append(rest_exp)
    else:  # the big cells hold (almost) all the mass: fold the rest into the last one
        obs[-1] += rest_obs
        exp[-1] += rest_exp
    if len(obs) == 1:  # one token holds all the mass
        assert obs[0] == runs
    else:
        assert stats.chisquare(obs, exp).pvalue >= 1e-4, (method, eog_p)


@pytest.mark.parametrize("method", METHODS[1:])
def test_greedy_identity(engine, method):
    for text in ["Hello", "The quick brown fox", "日本語のテキスト"]:
        sp = SamplingParams(temperature=0.0, max_tokens=60)
        ref = engine.generate(text, sp, DraftParams(method="none"))
        for dp in (DraftParams(method=method), DraftParams(method=method, policy="static", depth=3, draws=2)):
            res = engine.generate(text, sp, dp)
            assert res.tokens == ref.tokens, (method, dp.policy, text)
            assert res.text == ref.text


def test_kv_cache_consistent_after_many_steps(engine, tiny_reference):
    reference = tiny_reference
    # a fixed method: auto's tree shapes depend on the machine's measured speed
    res = engine.generate("Cache check:", SamplingParams(temperature=1.0, max_tokens=80, seed=3),
                          DraftParams(method="resispec"))
    full = engine.text_tokens("Cache check:") + res.tokens
    seq = list(engine.target.cached)
    # the cache holds the output (and, when max_tokens cut a step short, a little beyond)
    n = min(len(seq), len(full))
    assert seq[:n] == full[:n] and len(seq) >= len(full) - 1
    rows = engine.target.decode([42], [-1])
    expect = reference.logits_of_sequence(seq + [42])[-1]
    assert np.abs(rows[0] - expect).max() <= 1e-5 * max(1.0, np.abs(expect).max())
    engine.target.drop_uncommitted()
    draft_seq = engine.draft.cached
    m = min(len(draft_seq), len(seq))
    assert draft_seq[:m] == seq[:m]


def test_same_seed_same_output_and_stream_matches(engine):
    """Without the memory of past answers a one-slot engine's seed fixes the output however
    often it is used (a request that reads the memory draws anew when its seed repeats:
    ``decoding.seeding``)."""
    sp = SamplingParams(temperature=1.0, max_tokens=50, seed=11)
    alone = DraftParams(use_memory=False)
    a = engine.generate("Seeds", sp, alone)
    b = engine.generate("Seeds", sp, alone)
    assert a.tokens == b.tokens
    pieces = list(engine.stream("Seeds", sp, alone))
    assert "".join(pieces) == a.text == engine.last_result.text
    assert engine.last_result.tokens == a.tokens


def test_max_tokens_mid_step_truncates_exactly(engine):
    ref = engine.generate("Truncate", SamplingParams(temperature=0.0, max_tokens=40), DraftParams(method="none"))
    for n in (1, 2, 5, 7, 13):
        res = engine.generate("Truncate", SamplingParams(temperature=0.0, max_tokens=n), DraftParams(depth=6, budget=20))
        assert res.tokens == ref.tokens[:n] and res.finish_reason == "length"


def test_eos_inside_accepted_run_stops_there(engine, monkeypatch):
    sp = SamplingParams(temperature=0.0, max_tokens=40)
    ref = engine.generate("End of generation", sp, DraftParams(method="none"))
    stop_tok = ref.tokens[6]
    cut = ref.tokens.index(stop_tok)
    orig = engine.target.is_eog
    monkeypatch.setattr(engine.target, "is_eog", lambda t: t == stop_tok or orig(t))
    res = engine.generate("End of generation", sp, DraftParams(method="resispec", depth=6, budget=20))
    assert res.tokens == ref.tokens[:cut]
    assert res.finish_reason == "eos"
    assert res.stats.steps < cut + 1  # it did speculate


def test_stop_string(engine):
    ref = engine.generate("Stop here", SamplingParams(temperature=0.0, max_tokens=40), DraftParams(method="none"))
    stop = ref.text[10:13]
    assert stop and stop in ref.text
    res = engine.generate("Stop here", SamplingParams(temperature=0.0, max_tokens=40, stop=(stop,)), DraftParams())
    assert res.finish_reason == "stop"
    assert res.text == ref.text[: ref.text.index(stop)]


def test_context_full(tiny_pair):
    with Engine.load(str(tiny_pair[0]), str(tiny_pair[1]), n_ctx=256, progress=False, n_threads=1) as e:
        with pytest.raises(ContextFullError):
            e.generate([5] * 300, SamplingParams(max_tokens=5), DraftParams())
        res = e.generate([5] * 240, SamplingParams(temperature=1.0, max_tokens=100, seed=1), DraftParams())
        # the cache holds at most n_ctx tokens; the last emitted token is never in it
        assert res.finish_reason == "length" and 0 < len(res.tokens) <= 256 - 240 + 1
        assert e.target.n_past <= 256


def test_multi_turn_reuses_prefix(engine):
    first = engine.generate("Turn one.", SamplingParams(temperature=0.0, max_tokens=20), DraftParams())
    prompt2 = engine.text_tokens("Turn one.") + first.tokens + engine.target.tokenize(" Turn two.", add_special=False)
    second = engine.generate(prompt2, SamplingParams(temperature=0.0, max_tokens=5), DraftParams())
    assert second.stats.prompt_reused >= len(engine.text_tokens("Turn one.")) + len(first.tokens) - 2


def test_stats_are_coherent(engine):
    res = engine.generate("Stats", SamplingParams(temperature=1.0, max_tokens=64, seed=2), DraftParams())
    st = res.stats
    assert st.tokens == len(res.tokens)
    assert st.target_calls == st.steps
    assert st.tau == pytest.approx((st.tokens + st.eos_tokens) / st.steps)
    assert st.eos_tokens == (res.finish_reason == "eos")
    assert 1.0 <= st.tau <= DraftParams().max_depth + 1
    assert 0.0 < st.acceptance_rate <= 1.0
    assert all(a <= r for a, r in zip(st.accepted_by_depth, st.reached_by_depth))
    assert st.draft_time > 0 and st.target_time > 0
    assert st.total_time >= st.draft_time + st.target_time
    d = st.as_dict()
    assert d["tau"] == st.tau and d["overhead_time_s"] >= 0
    # which source paid: every output token belongs to the kind of step that gave it
    assert sum(st.tokens_by_kind.values()) == st.tokens and set(st.tokens_by_kind) == set(st.steps_by_kind)
    assert d["tokens_by_kind"] == st.tokens_by_kind


def test_tokenize_and_detokenize_as_llama_cpps_server(engine):
    ids = engine.tokenize("Once upon")
    assert engine.tokenize("Once upon", add_special=True) == engine.text_tokens("Once upon") == [engine.target.bos] + ids
    assert engine.detokenize(ids) == b"Once upon"
    bos_text = engine.detokenize([engine.target.bos])
    assert bos_text and engine.tokenize(bos_text.decode()) == [engine.target.bos]  # control text parsed ...
    assert engine.tokenize(bos_text.decode(), parse_special=False) != [engine.target.bos]  # ... or not


def test_method_without_draft_is_refused(tiny_pair):
    with Engine.load(str(tiny_pair[0]), "", n_ctx=128, progress=False, n_threads=1) as e:
        assert e.generate("x", SamplingParams(max_tokens=3, seed=0), DraftParams(method="none")).tokens
        with pytest.raises(Exception, match="needs a draft"):
            e.generate("x", SamplingParams(max_tokens=3), DraftParams(method="resispec"))
        # context lookup drafts without a draft model: greedy output is the target's own
        sp = SamplingParams(temperature=0.0, max_tokens=40)
        prompt = "abc abc abc abc abc abc"
        ref = e.generate(prompt, sp, DraftParams(method="none"))
        for dp in (DraftParams(method="chain", lookup=True), DraftParams(method="auto")):
            res = e.generate(prompt, sp, dp)
            assert res.tokens == ref.tokens, dp


def test_load_takes_model_params_or_their_fields(tiny_pair):
    params = ModelParams(target=str(tiny_pair[0]), draft="", n_ctx=128, n_threads=1, flash_attn=False)
    with Engine.load(params, progress=False) as e:
        assert not e.has_draft and e.n_ctx >= 128 and e.info()["draft"] is None
        info = e.info()["target"]
        assert info["path"] == str(tiny_pair[0]) and info["n_threads"] == 1 and info["flash_attn"] is False
    with pytest.raises(TypeError):
        Engine.load(params, n_ctx=256)
    with pytest.raises(ConfigError) as err:
        Engine.load(str(tiny_pair[0]), n_ctx=16)
    assert err.value.field == "n_ctx"


def test_reference_logits_are_a_sequential_decode(engine, tiny_reference):
    tokens = engine.text_tokens("Reference rows")
    rows = engine.reference_logits(tokens)
    assert rows.shape == (len(tokens), engine.n_vocab)
    expect = tiny_reference.logits_of_sequence(tokens)
    assert np.abs(rows - expect).max() <= 1e-5 * max(1.0, np.abs(expect).max())
    assert engine.reference_logits(tokens, draft=True).shape[0] == len(tokens)
    # the caches are left consistent: generation afterwards is unchanged
    sp, dp = SamplingParams(temperature=0.0, max_tokens=12), DraftParams(method="resispec")
    assert engine.generate("Reference rows", sp, dp).tokens == engine.generate("Reference rows", sp, DraftParams(method="none")).tokens


def test_a_closed_stream_is_interrupted(engine):
    stream = engine.stream("Interrupt me", SamplingParams(temperature=0.0, max_tokens=40), DraftParams())
    first = next(stream)
    stream.close()
    res = engine.last_result
    assert res.finish_reason == "interrupted" and res.text.startswith(first) and 0 < len(res.tokens) < 40


def test_a_string_prompt_gets_one_bos(engine):
    bos = engine.target.token_text(engine.target.bos).decode()
    plain = engine.generate("Hello", SamplingParams(max_tokens=1, seed=0), DraftParams(method="none"))
    rendered = engine.generate(bos + "Hello", SamplingParams(max_tokens=1, seed=0), DraftParams(method="none"))
    assert plain.stats.prompt_tokens == rendered.stats.prompt_tokens == len(engine.text_tokens("Hello"))
    assert engine.text_tokens(bos + "Hello").count(engine.target.bos) == 1


def test_draft_params_are_checked_against_the_models(tiny_pair, engine):
    engine.check_draft_params(DraftParams(method="resispec"))
    with Engine.load(str(tiny_pair[0]), "", n_ctx=128, progress=False, n_threads=1) as e:
        for ok in (DraftParams(method="auto"), DraftParams(method="none"), DraftParams(method="chain", lookup=True)):
            e.check_draft_params(ok)
        with pytest.raises(UserError, match="needs a draft"):
            e.check_draft_params(DraftParams(method="specinfer"))


def test_use_draft_off_drafts_from_the_context_alone(engine):
    """``use_draft=False`` with a draft loaded: lookup chains, no draft call, the plain output
    when greedy (as with no draft model at all)."""
    sp = SamplingParams(temperature=0.0, max_tokens=40)
    prompt = "abc abc abc abc abc abc"
    ref = engine.generate(prompt, sp, DraftParams(method="none"))
    for dp in (DraftParams(method="chain", lookup=True, use_draft=False), DraftParams(method="auto", use_draft=False)):
        res = engine.generate(prompt, sp, dp)
        assert res.tokens == ref.tokens, dp
        assert res.stats.draft_calls == 0 and res.stats.draft_time == 0.0
        assert set(res.stats.steps_by_kind) <= {"lookup", "none"}
    with pytest.raises(ConfigError, match="a tree needs lookup"):
        DraftParams(method="resispec", use_draft=False)


# an enum whose values share forced stretches ('"', "a b ") between free choices: a reply
# has certain positions (one token allowed), forced candidates and free tokens
_ENUM = {"enum": ["a b c d", "a b x", "ay", "q r"]}


@pytest.mark.parametrize("method", ["none", "resispec", "auto"])
def test_json_schema_tokens_follow_the_masked_target(engine, tiny_reference, method):
    """Under a real llguidance JSON-schema grammar (whose forced tokens are the trees' free
    candidates, and whose one-token positions are taken without a draw), every generated
    token follows the target's row masked by the grammar after its prefix: the randomised
    PIT of all positions is uniform."""
    grammar = engine.compile_constraint(json_schema=_ENUM)
    prompt = engine.text_tokens("Pick one")
    sp = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=8)
    dp = DraftParams(method=method, draws=3, depth=4, budget=8)
    rng = np.random.default_rng(7)
    pits, certain = [], 0
    rows: dict[tuple, np.ndarray] = {}
    for seed in range(300):
        res = engine.generate(prompt, sp.replace(seed=seed), dp, constraint=grammar)
        seq = list(res.tokens) + ([None] if res.finish_reason == "eos" else [])
        state = grammar.start()
        for i, tok in enumerate(seq):
            prefix = tuple(res.tokens[:i])
            if prefix not in rows:
                rows[prefix] = tiny_reference.logits_of_sequence(prompt + list(prefix))[-1]
            mask = state.mask(prefix)
            p = sampling.probs_dense(sampling.mask_logits(rows[prefix], mask), 1.0)
            certain += int(np.count_nonzero(p) == 1)
            assert tok is None or p[tok] > 0, "emitted a token the grammar or the target rules out"
            pits.append(_pit(p, tok, rng.random()))
    assert certain >= 300  # the forced quote at least, every run
    counts, _ = np.histogram(pits, bins=20, range=(0, 1))
    assert stats.chisquare(counts).pvalue >= 1e-4


# --------------------------------------------------------------------------- several requests at once


@pytest.fixture(scope="module")
def slotted_engine(tiny_pair):
    with Engine.load(str(tiny_pair[0]), str(tiny_pair[1]), n_ctx=512, n_threads=1, flash_attn=False, progress=False,
                     n_slots=4) as e:
        yield e


CONCURRENT = [
    ("def fib(n):", DraftParams(method="auto")),
    ("Once upon a time there was", DraftParams(method="resispec", draws=3, depth=4, budget=10)),
    ("The list: 1, 2, 3, 4, 1, 2, 3, 4,", DraftParams(method="chain", lookup=True)),
    ("Hello", DraftParams(method="none")),
]


def test_greedy_under_concurrency_equals_greedy_alone(engine, slotted_engine):
    """Four greedy requests in the same steps (one target decode holding every tree, one
    draft decode per level, prompts prefilled a few tokens a step) give token for token what
    each gives alone on a one-slot engine."""
    sp = SamplingParams(temperature=0.0, max_tokens=24)
    alone = [engine.generate(p, sp, dp) for p, dp in CONCURRENT]
    batch = slotted_engine.batch(chunk=4)
    reqs = [batch.admit(slotted_engine.generation(p, sp, dp)) for p, dp in CONCURRENT]
    assert sorted(r.slot for r in reqs) == [0, 1, 2, 3]
    text = ["" for _ in reqs]
    while batch.busy:
        for r in batch.step():
            text[reqs.index(r)] += "".join(r.take())
    for r, want, got in zip(reqs, alone, text):
        assert r.gen.out == want.tokens and got == want.text and r.gen.finish_reason == want.finish_reason
    # the slots hold each reply's tokens: resending one reuses its whole cached prefix
    again = slotted_engine.generation(CONCURRENT[1][0] + alone[1].text, sp, CONCURRENT[1][1])
    assert batch.free_slot(again.prompt) == reqs[1].slot


def test_engines_from_one_pool_share_its_models_and_leave_them_open(tiny_pair, incompatible_draft):
    from resispec_gguf.llama.loading import ModelPool

    pool = ModelPool(ModelParams(n_ctx=256, n_threads=1, flash_attn=False), progress=False)
    try:
        plain = Engine.from_pool(pool, str(tiny_pair[0]), prepare=False)
        paired = Engine.from_pool(pool, str(tiny_pair[0]), str(tiny_pair[1]), prepare=False)
        assert not plain.has_draft and paired.has_draft
        sp, dp = SamplingParams(temperature=0.0, max_tokens=6, seed=0), DraftParams(method="chain", depth=2)
        first = paired.generate("Once upon a time", sp, dp).tokens
        plain.close()  # the target stays open for the engine that shares it
        assert paired.generate("Once upon a time", sp, dp).tokens == first
        assert plain.generate("Once upon a time", sp, DraftParams(method="none")).tokens == first  # greedy: exact
        with pytest.raises(UserError, match="draft model is incompatible with the target"):
            Engine.from_pool(pool, str(tiny_pair[0]), str(incompatible_draft), prepare=False)
    finally:
        pool.close()
