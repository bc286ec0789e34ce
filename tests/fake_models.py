"""Markov fake models: ``protocol.ModelBackend`` implementations with a known exact law.

A ``MarkovModel`` of order m returns, after any context, the logits row ``table[last m
tokens]``.  The exact law of the first n generated tokens is therefore a product of n rows,
which is what the exactness harness (law_harness.py) compares the engine against.  The
fake enforces the same contract as ``backend.LlamaModel`` (sequence limit, context limit,
parents before children, rows invalid after the next call), so an engine bug that the real
backend would reject fails here too.  Order 2 makes a row depend on the node's parent as
well, which catches a tree evaluated with the wrong parent links.
"""

from __future__ import annotations

import itertools

import numpy as np

from resispec_gguf.errors import ContextFullError


class _Rows:
    """Rows of one decode; reading them after the model's next call is an error."""

    def __init__(self, model, generation, rows):
        self._model, self._generation, self._rows = model, generation, rows

    def __len__(self):
        return len(self._rows)

    def __getitem__(self, i):
        if self._generation != self._model._generation:
            raise RuntimeError("logits rows are only readable until the next decode")
        return self._rows[i]


class MarkovModel:
    """A model whose next-token logits depend only on the last ``order`` tokens.

    ``rows``: ``{context tuple (length order): float32 [V] logits}``, or a callable
    ``context -> logits``.  A context shorter than ``order`` (at the very start) is padded on
    the left with token 0.  ``n_slots``: committed sequences (``protocol.SlotBackend``); the
    single-sequence calls act on slot 0.
    """

    def __init__(self, rows, n_vocab, *, order=1, n_ctx=256, n_seq_max=98, eog=(), name="markov", n_slots=1,
                 n_batch=512, max_chain=None):
        self.n_vocab = int(n_vocab)
        self.n_batch = int(n_batch)
        self.order = int(order)
        self.n_ctx = int(n_ctx)
        self.n_seq_max = int(n_seq_max)
        self.n_slots = int(n_slots)
        self.n_threads = 1
        self._eog = frozenset(eog)
        self._rows = rows
        self._name = name
        self._seqs: list[list[int]] = [[] for _ in range(self.n_slots)]  # committed tokens per slot
        self._nodes: list[tuple[int, int, int, int]] = []  # (token, parent, position, slot)
        self._generation = 0
        self.calls = 0  # decode calls
        self.prefilled = 0  # prompt tokens evaluated (sync_slot, decode_slots' prefill), not restored
        self.merged = 0  # decodes that held prompt tokens beside nodes
        self.saves = self.loads = 0  # save_slot / load_slot calls
        self.fail_loads = False  # load_slot refuses (as llama.cpp without room for the cells)
        # ``protocol.ModelBackend.max_chain``: None, any tree; else the uncommitted nodes of a
        # slot form one chain, at most this many below its root (a recurrent model's memory)
        self.max_chain = max_chain
        self.node_counts: list[int] = []  # per decode that held nodes: how many it held

    # ------------------------------------------------------------------ protocol

    @property
    def cached(self) -> list[int]:
        return self._seqs[0]

    @property
    def n_past(self) -> int:
        return len(self._seqs[0])

    def slot_past(self, slot: int) -> int:
        return len(self._seqs[slot])

    def slot_tokens(self, slot: int) -> list[int]:
        return list(self._seqs[slot])

    def row(self, context) -> np.ndarray:
        ctx = tuple(context)[-self.order:]
        ctx = (0,) * (self.order - len(ctx)) + ctx
        out = self._rows(ctx) if callable(self._rows) else self._rows[ctx]
        return out

    def sync_prefix(self, tokens) -> int:
        return self.sync_slot(0, tokens)

    def sync_slot(self, slot: int, tokens) -> int:
        self._bump()
        self._nodes.clear()
        if len(tokens) > self.n_ctx:
            raise ContextFullError("prompt does not fit")
        want = list(tokens[:-1])
        common = 0
        for a, b in zip(self._seqs[slot], want):
            if a != b:
                break
            common += 1
        self._seqs[slot] = want
        self.prefilled += len(want) - common
        return common

    def save_slot(self, slot: int) -> np.ndarray:
        """``protocol.SlotStates``: the slot's tokens are its whole state."""
        self._nodes.clear()
        self._bump()
        self.saves += 1
        return np.asarray(self._seqs[slot], np.int64)

    def load_slot(self, slot: int, state, tokens, keep: int) -> bool:
        if list(state) != [int(t) for t in tokens] or not 0 <= keep <= len(state):
            raise AssertionError(f"a state of {len(state)} tokens restored as other tokens, or kept {keep}")
        self._nodes.clear()
        self._bump()
        self.loads += 1
        if self.fail_loads:
            self._seqs[slot] = []
            return False
        self._seqs[slot] = [int(t) for t in state[:keep]]
        return True

    def _context(self, node: int) -> list[int]:
        """Committed tokens plus the node's ancestors and itself, last ``order`` of them."""
        path = []
        cached = self._seqs[self._nodes[node][3]]
        while node >= 0:
            tok, par, _, _ = self._nodes[node]
            path.append(tok)
            node = par
            if len(path) >= self.order:
                break
        path.reverse()
        if len(path) < self.order:
            path = cached[max(0, len(cached) - (self.order - len(path))):] + path
        return path

    def decode(self, tokens, parents, want_logits=None):
        return self.decode_slots(tokens, parents, [0] * len(tokens), want_logits)

    def decode_slots(self, tokens, parents, slots, want_logits=None, prefill=None):
        tokens = [int(t) for t in tokens]
        parents = [int(p) for p in parents]
        slots = [int(s) for s in slots]
        prefill = {int(s): [int(t) for t in p] for s, p in (prefill or {}).items() if len(p)}
        n = len(tokens)
        if n + sum(map(len, prefill.values())) == 0 or len(parents) != n or len(slots) != n:
            raise ValueError("bad decode request")
        if n + sum(map(len, prefill.values())) > self.n_batch:
            raise ValueError(f"{n} nodes and {sum(map(len, prefill.values()))} prompt tokens exceed the batch")
        for slot, chunk in prefill.items():
            if not 0 <= slot < self.n_slots or slot in slots or any(node[3] == slot for node in self._nodes):
                raise ValueError(f"slot {slot} cannot prefill in this decode")
            if len(self._seqs[slot]) + len(chunk) > self.n_ctx:
                raise ContextFullError("the context is full")
        if n == 0:
            self._prefill(prefill, merged=False)
            return _Rows(self, self._generation, [])
        base = len(self._nodes)
        if base + n + self.n_slots > self.n_seq_max:
            raise ValueError(f"{base + n} uncommitted nodes exceed n_seq_max - {self.n_slots} = {self.n_seq_max - self.n_slots}")
        new = []
        for j, (tok, par, slot) in enumerate(zip(tokens, parents, slots)):
            if not (-1 <= par < base + j):
                raise ValueError(f"node {base + j} has parent {par}, which is not an earlier node")
            if not 0 <= slot < self.n_slots:
                raise ValueError(f"slot {slot} outside 0..{self.n_slots - 1}")
            if not 0 <= tok < self.n_vocab:
                raise ValueError(f"token {tok} outside the vocabulary")
            parent = None if par < 0 else (self._nodes[par] if par < base else new[par - base])
            if parent is not None and parent[3] != slot:
                raise ValueError(f"node {base + j} of slot {slot} has a parent in slot {parent[3]}")
            pos = len(self._seqs[slot]) if parent is None else parent[2] + 1
            new.append((tok, par, pos, slot))
        for slot in set(slots):
            mine = sum(1 for node in self._nodes + new if node[3] == slot)
            deepest = max(p for _, _, p, s in new if s == slot)
            if deepest + 1 > self.n_ctx or len(self._seqs[slot]) + mine > self.n_ctx:
                raise ContextFullError("the context is full")
        self._nodes.extend(new)
        self._check_chain()
        self.node_counts.append(n)
        want = [True] * n if want_logits is None else [bool(w) for w in want_logits]
        rows = [self.row(self._context(base + j)) for j in range(n) if want[j]]
        self._prefill(prefill, merged=True)
        return _Rows(self, self._generation, rows)

    def _prefill(self, prefill: dict, merged: bool) -> None:
        """The rest of a ``decode_slots`` call: its ``prefill`` joins the slots, and the call
        is counted (as a decode, its prompt tokens as ``prefilled``, and as ``merged`` when
        it held both nodes and prompt tokens)."""
        for slot, chunk in prefill.items():
            self._seqs[slot] = self._seqs[slot] + chunk
            self.prefilled += len(chunk)
        self.merged += bool(prefill) and merged
        self._bump()
        self.calls += 1

    def commit(self, path) -> None:
        self.commit_slots({0: path})

    def commit_slots(self, paths) -> None:
        for slot, path in paths.items():
            prev = -1
            for i in path:
                if self._nodes[i][1] != prev or self._nodes[i][3] != slot:
                    raise ValueError(f"commit path is not a chain from slot {slot}'s sequence: {list(path)}")
                prev = i
        for slot, path in paths.items():
            self._seqs[slot].extend(self._nodes[i][0] for i in path)
            if len(self._seqs[slot]) > self.n_ctx:
                raise AssertionError("committed past the context")
        self.drop_uncommitted()

    def drop_uncommitted(self) -> None:
        self._nodes.clear()
        self._bump()

    def reset(self) -> None:
        for seq in self._seqs:
            seq.clear()
        self.drop_uncommitted()

    def is_eog(self, token: int) -> bool:
        return int(token) in self._eog

    def token_piece(self, token: int) -> bytes:
        return b"<%d>" % int(token)

    def cost_key(self) -> str:
        return f"fake:{self._name}"

    def close(self) -> None:
        """Nothing to free (``Engine.close`` calls it)."""

    # ------------------------------------------------------------------ helpers

    def _check_chain(self) -> None:
        """With ``max_chain``: each slot's uncommitted nodes are one chain, a root and at most
        ``max_chain`` nodes below it (what the snapshots can undo)."""
        if self.max_chain is None:
            return
        for slot in {node[3] for node in self._nodes}:
            mine = [i for i, node in enumerate(self._nodes) if node[3] == slot]
            if len(mine) > self.max_chain + 1 or any(self._nodes[b][1] != a for a, b in zip([-1] + mine, mine)):
                raise ValueError(f"slot {slot}'s nodes are not one chain of at most {self.max_chain}")

    def _bump(self) -> None:
        self._generation += 1


def random_rows(n_vocab, order, seed, scale=2.0, overrides=None):
    """``{context: logits}`` for every context of length ``order``: N(0, scale) logits, read
    only, with ``overrides`` (``{context: probabilities}``) set as log-probabilities."""
    rng = np.random.default_rng(seed)
    rows = {}
    for ctx in itertools.product(range(n_vocab), repeat=order):
        rows[ctx] = (rng.standard_normal(n_vocab) * scale).astype(np.float32)
    for ctx, probs in (overrides or {}).items():
        with np.errstate(divide="ignore"):
            rows[tuple(ctx)] = np.log(np.asarray(probs, np.float64)).astype(np.float32)
    for r in rows.values():
        r.flags.writeable = False
    return rows


class PathConstraint:
    """A ``protocol.Constraint`` over a fake vocabulary whose allowed set depends on the whole
    generated path, with a known exact law (``allowed``).

    After history ``h`` (the generated tokens): when its last two tokens are equal the
    constraint is complete and only ``eog`` may follow; otherwise token ``x`` (not ``eog``)
    is allowed iff ``(x + sum(h)) % 3 != len(h) % 3``, and ``eog`` iff ``h`` is non-empty
    with an even sum.  Every state allows at least two tokens or is complete.  The state
    counts its ``mask`` calls and checks that every path it is asked about was allowed.

    ``forced`` (``protocol.ForcingState``) plays a grammar that knows its next tokens: after
    an even-length history that is not complete, the largest allowed token that is not
    ``eog``, then the same once more (two tokens at most).  They are only candidates: the
    mask still allows others, which the target often prefers.
    """

    def __init__(self, n_vocab, eog):
        self.n_vocab, self.eog = int(n_vocab), int(eog)

    def allowed(self, history) -> list[int]:
        h = list(history)
        if len(h) >= 2 and h[-1] == h[-2]:
            return [self.eog]
        out = [x for x in range(self.n_vocab) if x != self.eog and (x + sum(h)) % 3 != len(h) % 3]
        if h and sum(h) % 2 == 0:
            out.append(self.eog)
        return out

    def forced(self, history) -> list[int]:
        h, out = list(history), []
        if len(h) % 2:
            return out
        for _ in range(2):
            ok = [x for x in self.allowed(h) if x != self.eog]
            if not ok:
                break
            out.append(max(ok))
            h.append(out[-1])
        return out

    def start(self):
        return _SpecState(self)


class _SpecState:
    """One request's state in a fake constraint whose law is ``decoding.allowed(history)``; it
    counts its ``mask`` calls and checks that every path it is asked about was allowed."""

    def __init__(self, spec):
        self.spec = spec
        self.committed: list[int] = []
        self.mask_calls = 0
        self.forced_calls = 0

    def mask(self, path):
        from resispec_gguf.kernels.sampling import bitmask_from_ids

        path = [int(x) for x in path]
        for i, x in enumerate(path):  # the engine only asks about paths the masks allowed
            assert x in self.spec.allowed(self.committed + path[:i]), (self.committed, path)
        self.mask_calls += 1
        return bitmask_from_ids(self.spec.allowed(self.committed + path), self.spec.n_vocab)

    def forced(self, path):
        path = [int(x) for x in path]
        for i, x in enumerate(path):
            assert x in self.spec.allowed(self.committed + path[:i]), (self.committed, path)
        self.forced_calls += 1
        return self.spec.forced(self.committed + path)

    def advance(self, tokens):
        for x in tokens:
            assert x in self.spec.allowed(self.committed), (self.committed, x)
            self.committed.append(int(x))

    def is_stopped(self) -> bool:
        """Complete: only the end token may follow."""
        return self.spec.allowed(self.committed) == [self.spec.eog]


class LazyConstraint:
    """A lazy ``protocol.Constraint``: free text until a two-token trigger, then a
    path-dependent rule (a tool call constrained once its opening marker appears, a schema
    that starts when reasoning ends), with a known exact law (``allowed``).

    Before the first occurrence of ``trigger`` (a sequence of tokens, matched on the path's
    tokens, committed + path, the same way at every node: a trigger may span the committed
    tokens and the tree) every token is allowed, ``eog`` included.  After it, the tokens
    after the trigger follow ``PathConstraint``'s rule (so ``eog`` is not allowed right after
    the trigger, and two equal tokens complete the constraint: only ``eog`` may follow).  The
    state counts its ``mask`` calls and checks that every path it is asked about was allowed.
    ``inner``: another rule for the part after the trigger (``SpelledConstraint``).  It
    forces nothing before the trigger and what ``inner`` forces after it.
    """

    def __init__(self, n_vocab, eog, trigger=(4, 3), inner=None):
        self.n_vocab, self.eog = int(n_vocab), int(eog)
        self.trigger = tuple(int(t) for t in trigger)
        self.inner = inner if inner is not None else PathConstraint(n_vocab, eog)

    def triggered_at(self, history) -> int | None:
        """The index just past the first occurrence of the trigger in ``history``, or None."""
        h, k = tuple(history), len(self.trigger)
        for i in range(len(h) - k + 1):
            if h[i:i + k] == self.trigger:
                return i + k
        return None

    def allowed(self, history) -> list[int]:
        h = list(history)
        at = self.triggered_at(h)
        if at is None:
            return list(range(self.n_vocab))
        return self.inner.allowed(h[at:])

    def forced(self, history) -> list[int]:
        h = list(history)
        at = self.triggered_at(h)
        return [] if at is None else self.inner.forced(h[at:])

    def start(self):
        return _SpecState(self)


class SpelledConstraint:
    """A grammar over text, with the Markov fakes' tokens as spellings of it, and a known
    exact law (``allowed``): the forced bytes can be tokenised in several ways, as a real
    vocabulary's can.

    Tokens 0..4 spell "a", "b", "ab", "ba", "c"; ``eog`` (5) spells nothing.  The text must be
    a prefix of ``(a b X c)*`` with X one of a, b, c: positions 0, 1 and 3 (mod 4) are forced,
    position 2 is free.  A token is allowed iff its letters fit the positions they fall on;
    ``eog`` iff the text is non-empty and at a position 0.  So at position 0 "ab" may be one
    token or two ("a" then "b", or "a" then "ba" crossing into the free letter), and at
    position 3 only "c" fits: the mask allows one token there (a certain position).
    ``forced`` is the longest-first tokenisation of the forced letters ("ab" -> [2], "b" ->
    [1], "cab" -> [4, 2]), the candidate a grammar engine would offer.
    """

    SPELL = ("a", "b", "ab", "ba", "c")
    PATTERN = ("a", "b", None, "c")  # None: any of a, b, c

    def __init__(self, n_vocab=6, eog=5):
        assert n_vocab == 6 and eog == 5, "the spellings are for the harness's 6-token vocabulary"
        self.n_vocab, self.eog = int(n_vocab), int(eog)

    def _text(self, history) -> str:
        return "".join(self.SPELL[int(x)] for x in history)

    def _fits(self, pos: int, letters: str) -> bool:
        return all(self.PATTERN[(pos + i) % 4] in (None, c) for i, c in enumerate(letters))

    def allowed(self, history) -> list[int]:
        if self.eog in history:  # a path past an end token (a draft may propose one): never emitted
            return [self.eog]
        pos = len(self._text(history))
        out = [x for x in range(len(self.SPELL)) if self._fits(pos, self.SPELL[x])]
        if pos > 0 and pos % 4 == 0:
            out.append(self.eog)
        return out

    def forced(self, history) -> list[int]:
        if self.eog in history:
            return []
        pos = len(self._text(history))
        letters = ""
        while self.PATTERN[(pos + len(letters)) % 4] is not None:
            letters += self.PATTERN[(pos + len(letters)) % 4]
        out = []
        while letters:
            x = max((x for x in range(len(self.SPELL)) if letters.startswith(self.SPELL[x])),
                    key=lambda x: len(self.SPELL[x]))
            out.append(x)
            letters = letters[len(self.SPELL[x]):]
        return out

    def start(self):
        return _SpecState(self)


class RunsConstraint:
    """A constraint with runs of certain positions, with a known exact law (``allowed``): of
    every three positions (counted in tokens, shifted by ``phase``) the first is free (any
    letter token 0..4, or ``eog`` past the start) and the next two allow one token each,
    the token before it + 1 (mod 5): a run of two certain positions that depends on the
    path.  ``forced`` is the run ahead (empty at a free position).  It makes a tree
    expand certain nodes without draft rows and grow deeper than its ``depth``
    (``tree.growing``); with ``phase`` 1 the reply opens with the run.
    """

    def __init__(self, n_vocab=6, eog=5, phase=0):
        self.n_vocab, self.eog, self.phase = int(n_vocab), int(eog), int(phase)

    def allowed(self, history) -> list[int]:
        h = [int(x) for x in history]
        if self.eog in h:
            return [self.eog]
        at = (len(h) + self.phase) % 3
        if at == 0:
            return [0, 1, 2, 3, 4] + ([self.eog] if h else [])
        prev = h[-1] if h else 0
        return [(prev + 1) % 5]

    def forced(self, history) -> list[int]:
        h = [int(x) for x in history]
        out = []
        while self.eog not in h and (len(h) + len(out) + self.phase) % 3:
            out.append(self.allowed(h + out)[0])
        return out

    def start(self):
        return _SpecState(self)


class Clocked:
    """A fake model whose every decode adds its cost-curve price (``curve(rows)``) to a
    shared clock, ``clock[0]``: speeds in modelled seconds for any cost curve."""

    def __init__(self, model, curve, clock):
        self.m, self.curve, self.clock = model, curve, clock

    def __getattr__(self, name):
        return getattr(self.m, name)

    def decode(self, tokens, parents, want_logits=None):
        self.clock[0] += self.curve(len(tokens))
        return self.m.decode(tokens, parents, want_logits)

    def decode_slots(self, tokens, parents, slots, want_logits=None, prefill=None):
        self.clock[0] += self.curve(len(tokens) + sum(len(p) for p in (prefill or {}).values()))
        return self.m.decode_slots(tokens, parents, slots, want_logits, prefill)


def noisy_markov_pair(n_vocab, *, eog, n_ctx=256, seed=3, noise=0.3):
    """An order-1 ``(target, draft)`` pair whose draft is the target plus Gaussian noise."""
    rows = random_rows(n_vocab, 1, seed=seed)
    rng = np.random.default_rng(seed + 1)
    noisy = {ctx: (r + rng.normal(0, noise, n_vocab)).astype(np.float32) for ctx, r in rows.items()}
    return (MarkovModel(rows, n_vocab, eog=(eog,), n_ctx=n_ctx, name="t"),
            MarkovModel(noisy, n_vocab, eog=(eog,), n_ctx=n_ctx, name="d"))


def longest_match(texts, data: bytes) -> list[int]:
    """``data`` as the longest of ``texts`` (bytes per id; empty ones skipped) from the left,
    the lowest id among equal texts; stops before a byte no text starts with."""
    out, at = [], 0
    longest = max(len(t) for t in texts)
    by_text = {}
    for i, t in enumerate(texts):
        if t:
            by_text.setdefault(t, i)
    while at < len(data):
        for n in range(min(longest, len(data) - at), 0, -1):
            if data[at:at + n] in by_text:
                out.append(by_text[data[at:at + n]])
                at += n
                break
        else:
            break
    return out


class TextMarkov(MarkovModel):
    """A ``MarkovModel`` whose tokens stand for texts (``texts``: bytes per id), with a
    longest-match tokenizer: the draft of a cross-vocabulary fake pair."""

    def __init__(self, rows, texts, **kw):
        super().__init__(rows, len(texts), **kw)
        self.texts = [bytes(t) for t in texts]
        self.tokenized = 0  # bytes tokenized (the boundary window's, never the whole context again)

    def tokenize(self, text, *, add_special=True, parse_special=True) -> list[int]:
        data = text.encode() if isinstance(text, str) else bytes(text)
        self.tokenized += len(data)
        return longest_match(self.texts, data)

    def token_piece(self, token: int) -> bytes:
        return self.texts[int(token)]


class TextCodec:
    """A target's tokenizer over ``texts`` (``candidates.base.TextCodec``) for a fake target."""

    def __init__(self, texts):
        self.texts = [bytes(t) for t in texts]

    def detokenize(self, tokens) -> bytes:
        return b"".join(self.texts[int(t)] for t in tokens)

    def tokenize(self, text, *, add_special=False, parse_special=True) -> list[int]:
        return longest_match(self.texts, text.encode() if isinstance(text, str) else bytes(text))

    def token_piece(self, token) -> bytes:
        return self.texts[int(token)]
