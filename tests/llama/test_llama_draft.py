"""LlamaDraft: the draft policy on its own, then inside llama-cpp-python's ``Llama`` on the
tiny pair: greedy text identical to plain ``Llama``, the sampled laws the target's, the draft's
cache kept in step, a foreign vocabulary refused at the first call."""

import numpy as np
import pytest
from scipy import stats

llama_cpp = pytest.importorskip("llama_cpp")

import tiny_gguf  # noqa: E402
from resispec_gguf import LlamaDraft
from resispec_gguf.kernels import sampling  # noqa: E402
from resispec_gguf.llama.backend import LlamaModel  # noqa: E402
from resispec_gguf.errors import UserError  # noqa: E402
from resispec_gguf.llama.llama_draft import draft_chain  # noqa: E402
from resispec_gguf.decoding.lookup import NgramIndex  # noqa: E402

# ---------------------------------------------------------------------------------- the policy


def _model(script):
    """A fake draft model: ``script`` maps a fed token to (greedy token, probability)."""
    fed = []

    def next_token(t):
        fed.append(t)
        return script[t]

    return next_token, fed


def test_lookup_first_while_the_context_matches():
    ctx = [1, 2, 3, 4, 5, 9, 1, 2, 3]
    nt, fed = _model({})
    assert draft_chain(ctx, NgramIndex(ctx), nt, n_max=8, p_min=0.5, lookup_min=3) == [4, 5, 9, 1, 2, 3, 4, 5]
    assert fed == []  # no model call
    assert draft_chain(ctx, NgramIndex(ctx), nt, n_max=2, p_min=0.5, lookup_min=3) == [4, 5]


def test_model_chain_when_lookup_has_nothing():
    ctx = [1, 2, 3, 7, 2, 3]  # the last 2 tokens matched before, not 3
    nt, fed = _model({3: (10, 0.9), 10: (11, 0.8), 11: (12, 0.4), 12: (13, 0.99)})
    assert draft_chain(ctx, NgramIndex(ctx), nt, n_max=8, p_min=0.5, lookup_min=3) == [10, 11]
    assert fed == [3, 10, 11]  # stops before a token under p_min
    nt, fed = _model({3: (10, 0.9), 10: (11, 0.8), 11: (12, 0.4)})
    assert draft_chain(ctx, None, nt, n_max=1, p_min=0.5, lookup_min=3) == [10] and fed == [3]
    # with lookup_min 2, the bigram (2, 3) is trusted: 7 then what followed (3, 7)? nothing -> stops
    assert draft_chain(ctx, NgramIndex(ctx), None, n_max=8, p_min=0.5, lookup_min=2) == [7, 2, 3, 7, 2, 3, 7, 2]
    assert draft_chain(ctx, None, None, n_max=8, p_min=0.5, lookup_min=2) == []


# ---------------------------------------------------------------------------------- in Llama


def _llama(path, draft=None, seed=0):
    return llama_cpp.Llama(model_path=str(path), n_ctx=512, n_threads=1, seed=seed, verbose=False,
                           draft_model=draft)


@pytest.fixture(scope="module")
def plain(tiny_pair):
    return _llama(tiny_pair[0])


@pytest.fixture(scope="module")
def drafted(tiny_pair):
    draft = LlamaDraft(tiny_pair[1], n_ctx=512, n_threads=1, flash_attn=False, p_min=0.3)
    yield _llama(tiny_pair[0], draft), draft
    draft.close()


PROMPTS = ["Once upon a time", "abc abc abc abc abc abc", "def f(x):\n    return x\n\ndef f(x):\n"]


def test_greedy_text_is_plain_llamas(plain, drafted):
    llm, draft = drafted
    synced = []
    sync = draft.model.sync_prefix
    draft.model.sync_prefix = lambda ids: synced.append(len(ids) - 1 - sync(ids)) or 0
    try:
        generated = 0
        for prompt in PROMPTS:
            kw = dict(max_tokens=48, temperature=0.0)
            a = plain.create_completion(prompt, **kw)
            b = llm.create_completion(prompt, **kw)
            assert b["choices"][0]["text"] == a["choices"][0]["text"], prompt
            generated += b["usage"]["prompt_tokens"] + b["usage"]["completion_tokens"]
    finally:
        draft.model.sync_prefix = sync
    st = draft.stats
    assert st["calls"] > 0 and st["drafted"] > 0 and st["lookup_drafts"] > 0 and st["model_decodes"] > 0
    # the cache follows the ids: each token is read once, plus refused drafts re-read, never
    # the whole context again
    assert sum(synced) <= generated + st["drafted"]


def _exact_p(ref, tokens):
    row = ref.logits_of_sequence(tokens)[-1]
    return sampling.probs_dense(row, 1.0)


def test_sampled_laws_are_the_targets(tiny_pair, drafted):
    """T = 1, no filters: the first token's histogram against the target's p (chi-square), and
    the next two tokens, emitted after draft calls, by the randomised PIT."""
    llm, draft = drafted
    ref = LlamaModel(tiny_pair[0], n_ctx=512, n_seq_max=2, flash_attn=False, n_threads=1)
    try:
        prompt = llm.tokenize(b"abc abc abc ab")
        p0 = _exact_p(ref, prompt)
        rng = np.random.default_rng(5)
        first, pits, cache = [], [], {}
        runs = 400
        for seed in range(runs):
            llm.set_seed(seed)
            out = []
            for tok in llm.generate(prompt, top_k=0, top_p=1.0, min_p=0.0, temp=1.0, reset=True):
                out.append(tok)
                if len(out) == 3 or llm._model.token_eos() == tok or tok in (tiny_gguf.EOS_ID, tiny_gguf.IM_END_ID):
                    break
            first.append(out[0])
            for i in (1, 2):
                if i < len(out):
                    key = tuple(out[:i])
                    if key not in cache:
                        cache[key] = _exact_p(ref, prompt + list(key))
                    p = cache[key]
                    pits.append(p[: out[i]].sum() + rng.random() * p[out[i]])
        assert draft.stats["drafted"] > 0
        # first token: cells of expected count >= 5, the rest pooled
        counts = np.bincount(first, minlength=len(p0))
        big = p0 * runs >= 5
        obs = np.append(counts[big], counts[~big].sum())
        exp = np.append(p0[big], p0[~big].sum()) * runs
        keep = exp > 0
        assert stats.chisquare(obs[keep], exp[keep]).pvalue > 1e-3
        # later tokens: PIT values uniform
        hist = np.histogram(pits, bins=10, range=(0, 1))[0]
        assert len(pits) > 300 and stats.chisquare(hist).pvalue > 1e-3
    finally:
        ref.close()


def test_foreign_vocabulary_is_one_clear_error_at_the_first_call(tiny_pair, incompatible_draft):
    draft = LlamaDraft(incompatible_draft, n_ctx=512, n_threads=1)
    llm = _llama(tiny_pair[0], draft)
    with pytest.raises(UserError, match="vocabulary does not match the target's: token 5 differs"):
        llm.create_completion("Once upon a time", max_tokens=8, temperature=0.0)
    assert draft.stats["calls"] == 0  # nothing was drafted
    draft.close()


def test_bad_settings():
    for kw in ({"num_pred_tokens": 0}, {"p_min": 1.5}, {"lookup_min": 5}):
        with pytest.raises(ValueError):
            LlamaDraft("unused.gguf", **kw)
