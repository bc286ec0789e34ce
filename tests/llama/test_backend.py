"""The llama.cpp backend on tiny GGUF models: tree decoding, KV commit, pieces, bad files."""

import numpy as np
import pytest

import tiny_gguf

from resispec_gguf.llama import backend
from resispec_gguf.llama.backend import LlamaModel
from resispec_gguf.errors import ContextFullError, UserError
from resispec_gguf.decoding.textstream import TextAssembler


@pytest.fixture(scope="module")
def models(tiny_pair):
    m = LlamaModel(tiny_pair[0], n_ctx=256, n_seq_max=16, flash_attn=False, n_threads=1)
    ref = LlamaModel(tiny_pair[0], n_ctx=256, n_seq_max=4, flash_attn=False, n_threads=1)
    yield m, ref
    m.close()
    ref.close()


def same_logits(a, b):
    """Equal up to float32 round-off: batched and single-row matmuls sum in different orders
    (seen: 1.4e-5 on logits of magnitude ~7), so the bound is 1e-5 relative to the row scale."""
    return np.abs(a - b).max() <= 1e-5 * max(1.0, float(np.abs(b).max()))


def _path_tokens(tokens, parents, i):
    out = []
    while i >= 0:
        out.append(tokens[i])
        i = parents[i]
    return out[::-1]


def test_tree_decode_equals_sequential_decode(models):
    m, ref = models
    prompt = m.tokenize("The tree: ")
    m.sync_prefix(prompt + [0])  # prefix = prompt; the tree hangs after it
    # root r; r->a->c->d (depth 3), r->b (depth 1), a->e (depth 2), b->f->g (depth 3)
    tokens = [50, 60, 70, 80, 90, 100, 110, 120]
    parents = [-1, 0, 0, 1, 3, 1, 2, 6]
    rows = m.decode(tokens, parents)
    assert len(rows) == len(tokens)
    for i in range(len(tokens)):
        expect = ref.logits_of_sequence(prompt + _path_tokens(tokens, parents, i))[-1]
        assert same_logits(rows[i], expect), i
    # keep r, a, c and drop the rest; the next decode continues that path
    m.commit([0, 1, 3])
    assert m.cached == prompt + [50, 60, 80]
    rows = m.decode([42, 43], [-1, 0])
    expect = ref.logits_of_sequence(prompt + [50, 60, 80, 42, 43])
    assert same_logits(rows[0], expect[-2])
    assert same_logits(rows[1], expect[-1])
    m.drop_uncommitted()


def test_the_root_chain_leaves_the_committed_sequence_where_the_path_does_not_follow_it(models):
    """A step's first node off the committed sequence takes its id (``forest``'s root chain):
    a path leaving that chain, a path ending on it, and a dropped step all leave the committed
    sequence exactly as a sequential decode of what was committed."""
    m, ref = models
    prompt = m.tokenize("Roots")
    m.sync_prefix(prompt + [0])
    m.decode([50, 60, 70, 80, 90], [-1, 0, 0, 2, 1])  # r -> a -> e (the root chain), r -> b -> c
    m.commit([0, 2, 3])  # r, b, c: the path leaves the chain after r
    assert m.cached == prompt + [50, 70, 80]
    rows = m.decode([42, 43, 44], [-1, 0, 0])
    for row, path in zip([rows[0], rows[1], rows[2]], [[42], [42, 43], [42, 44]]):
        assert same_logits(row, ref.logits_of_sequence(prompt + [50, 70, 80] + path)[-1])
    m.drop_uncommitted()  # nothing committed: the next step starts from the same sequence
    rows = m.decode([45, 46], [-1, 0])
    assert same_logits(rows[1], ref.logits_of_sequence(prompt + [50, 70, 80, 45, 46])[-1])
    m.commit([0])  # a path ending on the chain: its rest (46) leaves
    rows = m.decode([47], [-1])
    assert same_logits(rows[0], ref.logits_of_sequence(prompt + [50, 70, 80, 45, 47])[-1])
    m.drop_uncommitted()


def test_level_by_level_decode_and_commit(models):
    """Nodes decoded in separate calls (the draft's levels) see their ancestors only; each
    call's rows are its own, also where the buffer's view of that row count is reused."""
    m, ref = models
    prompt = m.tokenize("Levels")
    m.sync_prefix(prompt + [0])
    m.decode([7, 8], [-1, 0])  # chain: pending token 7, root 8
    first = m.decode([30, 31], [1, 1])[0].copy()  # level 1: two children of the root (nodes 2, 3)
    rows = m.decode([40, 41], [2, 3])  # level 2: one child each (nodes 4, 5)
    assert rows[0].dtype == np.float32 and not rows[0].flags.writeable
    assert not np.array_equal(rows[0], first)
    for row, path in zip([rows[0], rows[1]], [[7, 8, 30, 40], [7, 8, 31, 41]]):
        expect = ref.logits_of_sequence(prompt + path)[-1]
        assert same_logits(row, expect)
    m.commit([0, 1, 3, 5])
    assert m.cached[-4:] == [7, 8, 31, 41]
    rows = m.decode([9], [-1])
    expect = ref.logits_of_sequence(prompt + [7, 8, 31, 41, 9])[-1]
    assert same_logits(rows[0], expect)
    m.drop_uncommitted()


def test_prefix_reuse_and_stale_rows(models):
    m, _ = models
    a = m.tokenize("shared prefix, then one ending")
    b = m.tokenize("shared prefix, then another")
    m.sync_prefix(a)
    reused = m.sync_prefix(b)
    common = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    assert reused == common
    assert m.cached == b[:-1]
    rows = m.decode([b[-1]], [-1])
    m.decode([5], [-1])
    with pytest.raises(RuntimeError, match="next decode"):
        rows[0]
    m.drop_uncommitted()
    rows = m.decode([b[-1]], [-1])
    assert rows[0].shape == (m.n_vocab,)  # read once: the decode's view is made
    m.decode([5], [-1])
    with pytest.raises(RuntimeError, match="next decode"):
        rows[0]
    m.drop_uncommitted()


def test_commit_rejects_non_chain(models):
    m, _ = models
    m.sync_prefix(m.tokenize("x y"))
    m.decode([5, 6, 7], [-1, 0, 0])
    with pytest.raises(ValueError, match="chain"):
        m.commit([0, 2, 1])
    m.drop_uncommitted()


def test_context_full(tiny_pair):
    m = LlamaModel(tiny_pair[0], n_ctx=256, n_seq_max=16, flash_attn=False, n_threads=1)
    assert m.n_ctx == 256
    with pytest.raises(ContextFullError):
        m.sync_prefix([5] * 300)
    m.sync_prefix([5] * 250)
    with pytest.raises(ContextFullError):
        m.decode(list(range(10, 18)), [-1] + list(range(7)))
    rows = m.decode([10, 11], [-1, 0])  # still usable, and the tree fits
    assert len(rows) == 2
    m.close()


def test_tokenize_roundtrip_and_incremental_utf8(models):
    m, _ = models
    text = "héllo wörld 🙂 — 日本"
    toks = m.tokenize(text, add_special=False)
    pieces = [m.token_piece(t) for t in toks]
    assert b"".join(pieces).decode() == text
    asm = TextAssembler()
    out = [asm.push(p) for p in pieces]
    assert all("\ufffd" not in s for s in out)
    assert "".join(out) + asm.flush() == text


def test_bad_files(tmp_path, not_gguf_file, truncated_gguf):
    with pytest.raises(UserError, match="not found"):
        LlamaModel(tmp_path / "missing.gguf")
    with pytest.raises(UserError, match="not a GGUF"):
        LlamaModel(not_gguf_file)
    with pytest.raises(UserError, match="truncated|corrupt"):
        LlamaModel(truncated_gguf)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(UserError, match="not a GGUF"):
        LlamaModel(empty)


def test_a_context_or_batch_too_small_for_the_sequences_is_refused(tiny_pair):
    with pytest.raises(UserError) as info:
        LlamaModel(tiny_pair[0], n_ctx=32, n_batch=512, n_seq_max=64, n_threads=1)
    assert str(info.value) == ("a context of 32 tokens is too small: it must hold at least 64 tokens "
                               "(one output row per sequence, 64 sequences)")
    with pytest.raises(UserError, match=r"^a batch of 16 tokens is too small: it must hold at least 64 tokens"):
        LlamaModel(tiny_pair[0], n_ctx=256, n_batch=16, n_seq_max=64, n_threads=1)


def test_decode_refuses_forests_that_do_not_fit(models):
    m, _ = models  # n_seq_max 16
    m.sync_prefix(m.tokenize("x y"))
    with pytest.raises(ValueError, match="nothing to decode"):
        m.decode([], [])
    with pytest.raises(ValueError, match=r"^16 uncommitted nodes exceed n_seq_max - 1 = 15$"):
        m.decode(list(range(10, 26)), [-1] + list(range(15)))
    assert len(m.decode([5, 6], [-1, 0])) == 2
    with pytest.raises(ValueError, match="node 2 has parent 5, which is not an earlier node"):
        m.decode([7], [5])
    m.drop_uncommitted()
    rows = m.decode([5, 6], [-1, 0], want_logits=[False, True])
    assert len(rows) == 1 and rows[0].shape == (m.n_vocab,)
    m.commit([0, 1])
    assert m.cached[-2:] == [5, 6]


def test_describe_and_cost_key(models, tiny_pair):
    m, _ = models
    info = m.describe()
    assert info["path"] == str(tiny_pair[0]) and info["n_ctx"] == 256 and info["n_threads"] == 1
    assert info["rpc"] is None and info["flash_attn"] is False and info["llama_cpp_python"]
    assert info["devices"] == ["CPU"]  # read off llama.cpp's load log: no GPU here, -ngl 0
    meta = info["meta"]  # what /v1/models reports, as llama.cpp's server does
    assert meta == m.figures() and meta["n_vocab"] == m.n_vocab and set(meta) == {
        "vocab_type", "n_vocab", "n_ctx_train", "n_embd", "n_params", "size"}
    assert meta["n_ctx_train"] > 0 and meta["n_embd"] > 0 and 0 < meta["n_params"] and 0 < meta["size"]
    assert meta["size"] <= tiny_pair[0].stat().st_size
    key = m.cost_key()
    assert key == m.cost_key() and str(tiny_pair[0]) not in key  # the content, not where the file is
    assert m.content_key().startswith(f"{tiny_pair[0].stat().st_size}:")


def test_token_pieces_from_two_threads_match_one_thread(engine):
    """The server formats logprobs on one thread while the engine detokenises on another:
    no ctypes out-buffer may be shared between them."""
    import threading

    model = engine.target
    tokens = list(range(model.n_vocab)) * 20
    reference = [model.token_piece(t) for t in tokens]
    results = {}

    def run(name, order):
        results[name] = [model.token_piece(t) for t in order]

    threads = [threading.Thread(target=run, args=("a", tokens)),
               threading.Thread(target=run, args=("b", tokens[::-1]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["a"] == reference and results["b"] == reference[::-1]


def test_quantize_and_build_facts(tmp_path):
    """llama.cpp's quantizer turns the F32 probe model into a Q4_K_M file that loads and
    decodes; ``build_facts`` is plain values."""
    from resispec_gguf.llama import gguf_file

    src, dst = tmp_path / "f32.gguf", tmp_path / "q4.gguf"
    gguf_file.write_probe_model(str(src))
    backend.quantize(str(src), str(dst), "Q4_K_M")
    assert 0 < dst.stat().st_size < src.stat().st_size / 4
    m = LlamaModel(dst, n_ctx=64, n_batch=64, n_seq_max=1, n_threads=1)
    try:
        assert m.logits_of_sequence([1, 40, 41]).shape == (3, 320) and m.describe()["devices"] == ["CPU"]
    finally:
        m.close()
    with pytest.raises(UserError, match="could not quantize"):
        backend.quantize(str(tmp_path / "missing.gguf"), str(dst))
    facts = backend.build_facts()
    assert facts["llama_cpp_python"] == backend._ll.__version__ and "CPU" in facts["system_info"]
    assert isinstance(facts["gpu_offload"], bool) and isinstance(facts["rpc"], bool) and facts["devices"]
    assert facts["rs_snapshots"] is True  # the pinned build keeps recurrent-state snapshots


def test_shown_specials_add_their_text_to_the_reply(models):
    """A special token adds no text, unless it is one the reply shows (a tool format's marker,
    such as Mistral's ``[TOOL_CALLS]``: llama.cpp's preserved tokens)."""
    model = models[0]
    im_start = tiny_gguf.IM_START_ID
    assert model.token_piece(im_start) == b"" and model.token_piece(im_start, special=True) == b"<|im_start|>"
    model.shown_specials = frozenset({im_start})
    try:
        assert model.token_piece(im_start) == b"<|im_start|>" and model.token_piece(tiny_gguf.IM_END_ID) == b""
    finally:
        model.shown_specials = frozenset()
    assert model.token_piece(im_start) == b""  # pieces are cached per (token, shown or not)


# --------------------------------------------------------------------------- slots


def near_logits(a, b):
    """Equal up to float32 round-off in a cache shared by several slots: the other slots'
    cells, masked out, still change how the attention sums are blocked (seen: 2e-5 of the
    row scale), so the bound is 1e-4 of it."""
    return np.abs(a - b).max() <= 1e-4 * max(1.0, float(np.abs(b).max()))


@pytest.fixture(scope="module")
def slotted(tiny_pair):
    m = LlamaModel(tiny_pair[0], n_ctx=128, n_seq_max=24, flash_attn=False, n_threads=1, n_slots=3)
    yield m
    m.close()


def test_each_slot_holds_its_own_committed_sequence(slotted, models):
    m, (_, ref) = slotted, models
    assert m.n_slots == 3 and m.n_ctx == 128
    prompts = [m.tokenize("First slot"), m.tokenize("Second"), m.tokenize("A third one")]
    for s, p in enumerate(prompts):
        assert m.sync_slot(s, p + [0]) == 0
    assert [m.slot_tokens(s) for s in range(3)] == prompts and m.cached == prompts[0]
    # one decode: a chain in slot 2, a root in slot 0, a fork in slot 1
    tokens, parents, slots = [30, 31, 40, 50, 51, 52], [-1, 0, -1, -1, 3, 3], [2, 2, 0, 1, 1, 1]
    rows = m.decode_slots(tokens, parents, slots)
    for i, (tok, slot) in enumerate(zip(tokens, slots)):
        expect = ref.logits_of_sequence(prompts[slot] + _path_tokens(tokens, parents, i))[-1]
        assert near_logits(rows[i], expect), i
    m.commit_slots({2: [0, 1], 1: [3, 5]})
    assert m.slot_tokens(2) == prompts[2] + [30, 31] and m.slot_tokens(1) == prompts[1] + [50, 52]
    assert m.slot_tokens(0) == prompts[0]
    rows = m.decode_slots([60, 61], [-1, -1], [1, 2])  # each slot continues its own sequence
    assert near_logits(rows[0], ref.logits_of_sequence(prompts[1] + [50, 52, 60])[-1])
    assert near_logits(rows[1], ref.logits_of_sequence(prompts[2] + [30, 31, 61])[-1])
    m.drop_uncommitted()
    # a re-sync of one slot leaves the others' caches as they were
    assert m.sync_slot(1, prompts[1] + [7, 0]) == len(prompts[1])
    rows = m.decode_slots([62], [-1], [2])
    assert near_logits(rows[0], ref.logits_of_sequence(prompts[2] + [30, 31, 62])[-1])
    m.drop_uncommitted()


def test_a_slot_refuses_nodes_of_another_slot_and_its_own_overflow(slotted):
    m = slotted
    m.sync_slot(0, m.tokenize("x") + [0])
    with pytest.raises(ValueError, match="outside that slot"):
        m.decode_slots([5, 6], [-1, 0], [0, 1])
    m.drop_uncommitted()
    with pytest.raises(ValueError, match="chain"):
        rows = m.decode_slots([5], [-1], [0])
        m.commit_slots({1: [0]})
    m.drop_uncommitted()
    m.sync_slot(1, [9] * 120 + [0])
    with pytest.raises(ContextFullError):
        m.decode_slots(list(range(10, 20)), [-1] + list(range(9)), [1] * 10)
    assert m.slot_past(1) == 120 and len(m._nodes) == 0
    rows = m.decode_slots([5], [-1], [0])  # the other slots are unaffected
    assert len(rows) == 1
    m.drop_uncommitted()


def test_a_prompt_prefilled_beside_other_slots_nodes_continues_as_if_prefilled_alone(slotted, models):
    """``decode_slots``' ``prefill``: prompt tokens appended to a slot in the same decode as
    other slots' nodes (and as a decode of their own), whose rows are as without them."""
    m, (_, ref) = slotted, models
    m.reset()
    a, b = m.tokenize("Running request"), m.tokenize("A prompt that arrives while it runs, in two chunks")
    m.sync_slot(0, a + [0])
    rows = m.decode_slots([11, 12], [-1, 0], [0, 0], prefill={1: b[:10], 2: []})
    assert len(rows) == 2 and near_logits(rows[1], ref.logits_of_sequence(a + [11, 12])[-1])
    assert m.slot_tokens(1) == b[:10]
    m.commit_slots({0: [0, 1]})
    m.decode_slots([], [], [], prefill={1: b[10:]})
    assert m.slot_tokens(1) == b and m.slot_tokens(0) == a + [11, 12]
    rows = m.decode_slots([13, 14], [-1, -1], [0, 1])
    assert near_logits(rows[0], ref.logits_of_sequence(a + [11, 12, 13])[-1])
    assert near_logits(rows[1], ref.logits_of_sequence(b + [14])[-1])
    m.drop_uncommitted()


def test_a_prefill_that_cannot_go_in_leaves_every_slot_as_it_was(slotted):
    m = slotted
    m.reset()
    m.sync_slot(0, [5, 6, 0])
    with pytest.raises(ValueError, match="cannot prefill"):  # a slot with nodes of this step
        m.decode_slots([7], [-1], [0], prefill={0: [8, 9]})
    with pytest.raises(ValueError, match="batch"):
        m.decode_slots([7], [-1], [0], prefill={1: [8] * m.n_batch})
    with pytest.raises(ContextFullError):
        m.decode_slots([], [], [], prefill={1: [8] * (m.n_ctx + 1)})
    assert m.slot_tokens(0) == [5, 6] and m.slot_tokens(1) == [] and len(m._nodes) == 0
    rows = m.decode_slots([7], [-1], [0], prefill={1: [8, 9]})
    assert len(rows) == 1 and m.slot_tokens(1) == [8, 9]
    m.drop_uncommitted()


def test_a_slot_saved_to_ram_restores_into_another_slot_as_if_prefilled(slotted, models):
    """``save_slot``/``load_slot`` (the RAM prompt cache): a state saved from one slot and
    restored, trimmed, into another gives the logits of the same tokens prefilled."""
    m, (_, ref) = slotted, models
    m.reset()
    prompt = m.tokenize("The quick brown fox jumps over the lazy dog, again and again, many times over")
    m.sync_slot(0, prompt + [0])
    state = m.save_slot(0)
    assert state.nbytes > 0 and m.slot_tokens(0) == prompt  # saving leaves the slot as it was
    m.sync_slot(1, m.tokenize("Something else entirely") + [0])
    m.sync_slot(0, m.tokenize("Slot zero moves on") + [0])  # the saved cells are gone from the cache
    keep = len(prompt) - 5
    assert m.load_slot(2, state, prompt, keep) and m.slot_tokens(2) == prompt[:keep]
    rows = m.decode_slots([7, 8], [-1, 0], [2, 2])  # the trimmed slot continues after its kept tokens
    assert near_logits(rows[1], ref.logits_of_sequence(prompt[:keep] + [7, 8])[-1])
    m.drop_uncommitted()
    assert m.load_slot(1, state, prompt, len(prompt))  # whole, over a slot that held another prompt
    rows = m.decode_slots([9], [-1], [1])
    assert near_logits(rows[0], ref.logits_of_sequence(prompt + [9])[-1])
    assert int(np.argmax(rows[0])) == int(np.argmax(ref.logits_of_sequence(prompt + [9])[-1]))
    m.drop_uncommitted()
    # the other slots kept theirs
    rows = m.decode_slots([9], [-1], [0])
    assert near_logits(rows[0], ref.logits_of_sequence(m.tokenize("Slot zero moves on") + [9])[-1])
    m.drop_uncommitted()


@pytest.mark.parametrize("n_slots", [2, 1])
def test_a_ram_prompt_cache_leaves_greedy_replies_as_they_were(tiny_pair, n_slots):
    """Through the engine: prompts that evict each other from two slots (or one: ``loop``'s
    sequence), then come back, reply token for token as without the cache, and the restored
    tokens count as reused."""
    from resispec_gguf.config import DraftParams, SamplingParams
    from resispec_gguf.engine import Engine

    prompts = ["def fibonacci(n): return the n-th Fibonacci number, iteratively and fast, for any n",
               "Once upon a time, in a land far away, there lived a king who had three daughters and",
               ]
    replies = {}
    for mib in (0, 64):
        with Engine.load(str(tiny_pair[0]), str(tiny_pair[1]), n_ctx=256, n_threads=1, flash_attn=False,
                         n_slots=n_slots, cache_ram_mib=mib, progress=False) as engine:
            out = []
            for p in prompts + prompts:
                res = engine.generate(p, SamplingParams(temperature=0.0, max_tokens=8), DraftParams(method="chain"))
                out.append((res.tokens, res.stats.prompt_reused))
            replies[mib] = out, engine.prompt_cache
    assert [t for t, _ in replies[64][0]] == [t for t, _ in replies[0][0]]
    assert [n for _, n in replies[0][0]][2:] == [1, 1]  # each evicted the other: all but BOS prefilled again
    ram = replies[64][1]  # a hit per model per prompt
    assert ram.hits == 4 and all(n >= 32 for _, n in replies[64][0][2:]), replies[64][0]


def test_the_package_re_exports_its_modules_names():
    """``backend``'s names are its modules' own objects (so a test patching one patches the
    module that looks it up: ``native`` for the RPC and log calls), and ``LlamaModel`` is
    composed of the vocabulary, batch and KV mixins."""
    from resispec_gguf.llama.backend import batches, kv, model, native, tokens

    assert backend.LlamaModel is model.LlamaModel and backend.LogitsRows is batches.LogitsRows
    assert backend.llama_vocab_info is tokens.llama_vocab_info
    for name in ("LlamaDraftModel", "build_facts", "quantize", "rpc_hello", "rpc_supported", "rpc_worker_devices",
                 "serve_rpc_worker", "set_verbose"):
        assert getattr(backend, name) is getattr(native, name), name
    assert all(hasattr(backend, name) for name in backend.__all__)
    assert [c.__name__ for c in LlamaModel.__mro__[1:-1]] == ["Tokens", "Batches", "KVCache", "RecurrentState"]
    assert LlamaModel.tokenize is tokens.Tokens.tokenize and LlamaModel.decode is batches.Batches.decode
    assert LlamaModel.commit is kv.KVCache.commit


def test_flash_attention_defaults_off_on_the_cpu_alone(tiny_pair):
    """Unasked, a model whose layers all run on the CPU gets flash attention off (there it
    makes a speculative step's rows dearer); an asked setting, a GPU or RPC layer keep theirs."""
    from resispec_gguf.llama.backend.model import cpu_flash_attn

    assert cpu_flash_attn(None, ["CPU"], None) is False
    assert cpu_flash_attn(True, ["CPU"], None) is True and cpu_flash_attn(False, ["CUDA0"], None) is False
    assert cpu_flash_attn(None, ["CUDA0", "CPU"], None) is None  # llama.cpp decides
    assert cpu_flash_attn(None, ["CPU"], "127.0.0.1:50052") is None
    m = LlamaModel(tiny_pair[0], n_ctx=256, n_seq_max=4, n_threads=1)
    try:
        assert m.describe()["flash_attn"] is False
    finally:
        m.close()
