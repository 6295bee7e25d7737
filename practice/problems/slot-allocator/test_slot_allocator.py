"""Tests for SlotKVCache: slot hand-out, isolation between slots, and errors that change nothing."""

import torch

from grading import check_close, check_equal, check_raises


def kv(n, value):
    t = torch.full((n, 1, 2), float(value))
    return t, -t


def test_acquire_hands_out_the_lowest_free_slot(learner):
    """Scan for the first free slot: a, b, c get 0, 1, 2; after b leaves, d gets 1."""
    cache = learner.SlotKVCache(4, 8, 1, 2)
    check_equal([cache.acquire(r) for r in "abc"], [0, 1, 2], "the slots of a, b, c")
    cache.release("b")
    check_equal(cache.acquire("d"), 1, "the slot of d after b released slot 1")
    check_equal(cache.slot_of("c"), 2, "slot_of('c')")


def test_full_cache_raises_no_free_slot_error(learner):
    """With every slot taken, acquire raises NoFreeSlotError and nobody loses their slot."""
    cache = learner.SlotKVCache(2, 8, 1, 2)
    cache.acquire("a"), cache.acquire("b")
    check_raises(learner.NoFreeSlotError, cache.acquire, "c", what="acquire('c') with both slots taken")
    check_equal([cache.slot_of("a"), cache.slot_of("b")], [0, 1], "the slots of a and b after the refusal")
    cache.release("a")
    check_equal(cache.acquire("c"), 0, "acquire('c') once a has left")


def test_a_request_holds_at_most_one_slot(learner):
    """acquire for a request that already has a slot is a mistake: ValueError, and no second slot."""
    cache = learner.SlotKVCache(3, 8, 1, 2)
    cache.acquire("a")
    check_raises(ValueError, cache.acquire, "a", what="acquire('a') twice")
    check_equal(cache.acquire("b"), 1, "the slot of b after the refused second acquire of a")


def test_append_returns_the_whole_history(learner):
    """append writes after the slot's stored tokens and returns all of them, old and new."""
    cache = learner.SlotKVCache(2, 8, 1, 2)
    cache.acquire("a")
    cache.append("a", *kv(3, 1))
    k, v = cache.append("a", *kv(2, 2))
    check_close(k, torch.cat([kv(3, 1)[0], kv(2, 2)[0]]), "the keys of a after appending 3 then 2 tokens", atol=0)
    check_close(v, torch.cat([kv(3, 1)[1], kv(2, 2)[1]]), "the values of a after appending 3 then 2 tokens", atol=0)


def test_slots_do_not_see_each_other(learner):
    """Each slot has its own length: a's tokens never show up in b's history."""
    cache = learner.SlotKVCache(2, 8, 1, 2)
    cache.acquire("a"), cache.acquire("b")
    cache.append("a", *kv(2, 1))
    cache.append("b", *kv(3, 5))
    k, _ = cache.append("a", *kv(1, 2))
    check_close(k, torch.cat([kv(2, 1)[0], kv(1, 2)[0]]), "the keys of a, interleaved with b's appends", atol=0)
    k, _ = cache.append("b", *kv(1, 6))
    check_close(k, torch.cat([kv(3, 5)[0], kv(1, 6)[0]]), "the keys of b, interleaved with a's appends", atol=0)


def test_history_lives_in_the_preallocated_buffer(learner):
    """The keys of the request in slot s are cache.k[s, :length]: write into the buffer, not a new tensor."""
    cache = learner.SlotKVCache(3, 8, 1, 2)
    cache.acquire("a"), cache.acquire("b")
    cache.append("b", *kv(2, 7))
    check_close(cache.k[1, :2], kv(2, 7)[0], "cache.k[1, :2] (slot 1 holds b)", atol=0)
    check_close(cache.v[1, :2], kv(2, 7)[1], "cache.v[1, :2] (slot 1 holds b)", atol=0)


def test_a_reused_slot_starts_empty(learner):
    """Reset the slot's length when it is handed out again: the next owner must not inherit tokens."""
    cache = learner.SlotKVCache(1, 8, 1, 2)
    cache.acquire("a")
    cache.append("a", *kv(4, 1))
    cache.release("a")
    cache.acquire("b")
    k, _ = cache.append("b", *kv(1, 3))
    check_close(k, kv(1, 3)[0], "the history of b, the new owner of a's old slot", atol=0)


def test_context_overflow_raises_and_keeps_the_slot(learner):
    """Check length + T <= max_ctx before writing: ValueError, and the stored tokens stay as they were."""
    cache = learner.SlotKVCache(1, 4, 1, 2)
    cache.acquire("a")
    cache.append("a", *kv(3, 1))
    check_raises(ValueError, cache.append, "a", *kv(2, 9), what="appending 2 tokens to 3 stored, max_ctx 4")
    k, _ = cache.append("a", *kv(1, 2))
    check_close(k, torch.cat([kv(3, 1)[0], kv(1, 2)[0]]), "the keys of a after the refused append", atol=0)


def test_unknown_requests_raise_value_error(learner):
    """release, slot_of and append of a request without a slot raise ValueError."""
    cache = learner.SlotKVCache(2, 4, 1, 2)
    cache.acquire("a")
    check_raises(ValueError, cache.release, "x", what="release('x') of a request without a slot")
    check_raises(ValueError, cache.slot_of, "x", what="slot_of('x')")
    check_raises(ValueError, cache.append, "x", *kv(1, 1), what="append('x', ...)")
    check_equal(cache.slot_of("a"), 0, "the slot of a after those errors")


def test_reserved_tokens_dwarf_used_tokens(learner):
    """used = tokens stored by requests holding a slot; reserved = max_ctx per slot in use."""
    cache = learner.SlotKVCache(4, 100, 1, 2)
    for r, n in [("a", 10), ("b", 30), ("c", 5)]:
        cache.acquire(r)
        cache.append(r, *kv(n, 1))
    cache.release("c")
    check_equal([cache.used_tokens(), cache.reserved_tokens()], [40, 200],
                "[used_tokens(), reserved_tokens()] with a: 10 and b: 30 tokens in slots of 100")
