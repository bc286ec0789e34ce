"""``decoding.protocol``: the seams.  The llama.cpp backend and the Markov fakes both satisfy
``ModelBackend``; a grammar's state and the fakes' path constraint satisfy the constraint
protocols; an object missing a method does not."""

from fake_models import MarkovModel, PathConstraint, random_rows
from resispec_gguf.decoding.protocol import Constraint, ConstraintState, ModelBackend, SlotBackend, SlotStates


def test_the_fakes_and_the_backend_are_model_backends(engine):
    assert isinstance(MarkovModel(random_rows(4, 1, seed=0), 4), ModelBackend)
    assert isinstance(engine.target, ModelBackend) and isinstance(engine.draft, ModelBackend)


def test_the_fakes_and_the_backend_save_and_restore_slot_states(engine):
    """``SlotStates`` (the RAM prompt cache's calls) is optional: both have it, a plain slot
    backend is not one."""
    assert isinstance(MarkovModel(random_rows(4, 1, seed=0), 4, n_slots=2), SlotStates)
    assert isinstance(engine.target, SlotStates) and isinstance(engine.draft, SlotStates)

    class NoStates:
        n_vocab = n_ctx = n_seq_max = n_threads = n_slots = n_batch = 4

    for name in ("n_past", "sync_prefix", "decode", "commit", "drop_uncommitted", "reset", "is_eog", "token_piece",
                 "cost_key", "slot_past", "slot_tokens", "sync_slot", "decode_slots", "commit_slots"):
        setattr(NoStates, name, lambda self, *a: None)
    assert isinstance(NoStates(), SlotBackend) and not isinstance(NoStates(), SlotStates)


def test_constraints_and_their_states(engine):
    grammar = engine.compile_constraint(json_schema={"type": "boolean"})
    assert isinstance(grammar, Constraint) and isinstance(grammar.start(), ConstraintState)
    fake = PathConstraint(6, 5)
    assert isinstance(fake, Constraint) and isinstance(fake.start(), ConstraintState)


def test_an_object_without_the_seam_is_not_a_backend():
    class Half:
        n_vocab = n_ctx = n_seq_max = n_threads = 4

        def decode(self, tokens, parents, want_logits=None):
            return []

    assert not isinstance(Half(), ModelBackend)
