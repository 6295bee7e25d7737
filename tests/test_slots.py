"""Chapter 3: fixed KV slots — allocation, isolation against running alone, and the memory
arithmetic."""

from __future__ import annotations

import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from minillm.kv_cache import KVCache, forward_cached, generate
from minillm.slots import (
    OutOfSlotsError,
    PrivateBatchView,
    SlotKVCache,
    SlotRequest,
    SlotView,
    batch_decode_step,
    batch_prefill,
    decode,
    gather_rows,
    one_forward_decode_step,
    prefill,
    reserved_kv_bytes,
    sample_length_mix,
    write_rows,
    write_step,
)

MiB, GiB = 2**20, 2**30


@pytest.fixture(scope="module")
def small(tiny_model):
    return tiny_model(seed=3)


def state(cache: SlotKVCache):
    return dict(cache.request_to_slot), list(cache.free_slots), list(cache.lengths)


# --- allocating and freeing slots
#   ----------------------------------------------------------------------


def test_allocate_hands_out_lowest_free_slot_and_free_returns_it():
    cache = SlotKVCache(1, 3, 8, 1, 4)
    assert [cache.allocate_slot(r) for r in "abc"] == [0, 1, 2]
    cache.free_slot("b")
    assert cache.num_free == 1
    assert cache.allocate_slot("d") == 1


def test_out_of_slots_names_the_waiting_request_and_changes_nothing():
    cache = SlotKVCache(1, 2, 8, 1, 4)
    cache.allocate_slot("a"), cache.allocate_slot("b")
    before = state(cache)
    with pytest.raises(OutOfSlotsError, match="all 2 slots are taken .* request 'c' must wait"):
        cache.allocate_slot("c")
    assert state(cache) == before


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda c: c.allocate_slot("a"), "request 'a' already holds slot 0"),
        (
            lambda c: c.free_slot("zzz"),
            "request 'zzz' holds no slot: expected one of \\['a'\\]",
        ),
        (lambda c: c.view(7), "request 7 holds no slot"),
    ],
)
def test_bad_slot_calls_raise_and_change_nothing(call, message):
    cache = SlotKVCache(1, 2, 8, 1, 4)
    cache.allocate_slot("a")
    before = state(cache)
    with pytest.raises(ValueError, match=message):
        call(cache)
    assert state(cache) == before


def test_freeing_twice_is_an_error():
    cache = SlotKVCache(1, 2, 8, 1, 4)
    cache.allocate_slot("a")
    cache.free_slot("a")
    with pytest.raises(ValueError, match="request 'a' holds no slot"):
        cache.free_slot("a")
    assert cache.free_slots == [0, 1]


# --- running requests in their slots
#   ---------------------------------------------------------------


def alone(model, prompt, n):
    tokens, logits = generate(model, prompt, n, return_logits=True)
    return tokens, logits


# no shrinking phase: every try runs the model, and a failing interleaving is readable as it is
@settings(max_examples=12, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(
    st.lists(st.tuples(st.integers(1, 24), st.integers(1, 6)), min_size=2, max_size=4),
    st.integers(0, 10**6),
    st.randoms(use_true_random=False),
)
def test_each_request_in_a_slot_matches_running_it_alone(small, specs, seed, rng):
    """Random prompts, interleaved in a random order, in a cache with fewer slots than
    requests."""
    g = torch.Generator().manual_seed(seed)
    reqs = [
        SlotRequest(i, torch.randint(0, 512, (p,), generator=g).tolist(), n)
        for i, (p, n) in enumerate(specs)
    ]
    cache = SlotKVCache.for_model(small, max_batch=len(reqs) - 1 or 1, max_ctx=32)
    waiting, running = list(reqs), []
    while waiting or running:
        if (
            waiting and cache.num_free
        ):  # admit one request, then run one step of a random running request
            r = waiting.pop(0)
            batch_prefill(small, cache, [r])
            running.append(r)
        r = rng.choice(running)
        batch_decode_step(small, cache, [r])
        running = [x for x in running if not x.finished]
    for r in reqs:
        tokens, logits = alone(small, r.prompt_ids, r.max_new_tokens)
        assert r.generated == tokens
        assert (torch.stack(r.logits) - logits).abs().max().item() < 1e-5
    assert cache.num_free == cache.max_batch  # every finished request gave its slot back


def test_a_reused_slot_does_not_leak_the_previous_request(small):
    cache = SlotKVCache.for_model(small, max_batch=1, max_ctx=32)
    first = SlotRequest("first", list(range(20)), 3)
    batch_prefill(small, cache, [first])
    while not first.finished:
        batch_decode_step(small, cache, [first])
    second = SlotRequest("second", [5, 6, 7], 4)
    batch_prefill(small, cache, [second])
    while not second.finished:
        batch_decode_step(small, cache, [second])
    tokens, logits = alone(small, second.prompt_ids, 4)
    assert second.generated == tokens
    assert (torch.stack(second.logits) - logits).abs().max().item() < 1e-5


def test_request_done_after_prefill_frees_its_slot(small):
    cache = SlotKVCache.for_model(small, max_batch=1, max_ctx=8)
    one = SlotRequest("one", [1, 2, 3], max_new_tokens=1)
    batch_prefill(small, cache, [one])
    assert one.finished and cache.num_free == 1 and cache.request_to_slot == {}


def test_prefill_that_would_overflow_the_slot_changes_nothing(small):
    cache = SlotKVCache.for_model(small, max_batch=2, max_ctx=8)
    cache.allocate_slot("a")
    with pytest.raises(
        ValueError, match="request 'a' would reach 9 tokens, but slot 0 holds max_ctx=8"
    ):
        prefill(small, cache, "a", list(range(9)))
    assert cache.lengths == [0, 0]


def test_decode_past_max_ctx_raises_and_keeps_the_slot(small):
    cache = SlotKVCache.for_model(small, max_batch=1, max_ctx=4)
    cache.allocate_slot("a")
    prefill(small, cache, "a", [1, 2, 3, 4])
    with pytest.raises(ValueError, match="would reach 5 tokens"):
        decode(small, cache, "a", 5)
    assert cache.lengths == [4]


def test_bad_token_leaves_the_slot_empty(small):
    cache = SlotKVCache.for_model(small, max_batch=1, max_ctx=8)
    cache.allocate_slot("a")
    with pytest.raises(ValueError, match="token id 999 is outside the vocabulary"):
        prefill(small, cache, "a", [1, 999])
    assert cache.lengths == [0]


@pytest.mark.parametrize(
    "steps, message",
    [
        (
            lambda m, c: decode(m, c, "a", 1),
            "request 'a' has an empty slot 0: prefill it before decoding",
        ),
        (
            lambda m, c: (prefill(m, c, "a", [1]), prefill(m, c, "a", [2])),
            "already has 1 tokens in slot 0",
        ),
        (lambda m, c: prefill(m, c, "a", []), "request 'a' has an empty prompt"),
        (lambda m, c: prefill(m, c, "b", [1]), "request 'b' holds no slot"),
    ],
)
def test_prefill_and_decode_reject_wrong_order_and_bad_input(small, steps, message):
    cache = SlotKVCache.for_model(small, max_batch=1, max_ctx=8)
    cache.allocate_slot("a")
    with pytest.raises(ValueError, match=message):
        steps(small, cache)


def test_request_must_ask_for_at_least_one_token():
    with pytest.raises(ValueError, match="request 'x' asks for 0 new tokens"):
        SlotRequest("x", [1], 0)


def test_batch_prefill_refuses_more_requests_than_free_slots(small):
    cache = SlotKVCache.for_model(small, max_batch=2, max_ctx=8)
    reqs = [SlotRequest(i, [1, 2], 2) for i in range(3)]
    with pytest.raises(OutOfSlotsError, match="3 requests need slots but only 2 of 2 are free"):
        batch_prefill(small, cache, reqs)
    assert cache.num_free == 2 and all(r.slot == -1 for r in reqs)


def test_failed_prefill_gives_the_slot_back(small):
    cache = SlotKVCache.for_model(small, max_batch=2, max_ctx=8)
    reqs = [SlotRequest("ok", [1, 2], 2), SlotRequest("bad", [1, 999], 2)]
    with pytest.raises(ValueError, match="token id 999"):
        batch_prefill(small, cache, reqs)
    assert cache.request_to_slot == {"ok": 0} and reqs[1].slot == -1


# --- the memory arithmetic
#   -----------------------------------------------------------------------------


def test_seed_arithmetic_512_mib_per_layer_per_slot():
    """27B-class model, TP2: 16 KV heads per rank, head_dim 128, 64K context, fp16."""
    assert reserved_kv_bytes(1, 65_536, 1, 16, 128, 2) == 512 * MiB
    assert reserved_kv_bytes(1, 65_536, 16, 16, 128, 2) == 8 * GiB
    assert reserved_kv_bytes(8, 65_536, 16, 16, 128, 2) == 64 * GiB


def test_slot_cache_reserves_what_the_formula_says(small):
    cache = SlotKVCache.for_model(small, max_batch=3, max_ctx=16)
    cfg = small.cfg
    assert cache.reserved_bytes() == reserved_kv_bytes(
        3, 16, cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.hd, 4
    )
    cache.allocate_slot("a")
    prefill(small, cache, "a", [1, 2, 3, 4, 5])
    assert cache.used_bytes() == cache.reserved_bytes() * 5 // (3 * 16)


def test_length_mix_is_seeded_long_tailed_and_fits_the_context():
    prompt, output = sample_length_mix(2000, seed=0, max_ctx=65_536)
    again, _ = sample_length_mix(2000, seed=0, max_ctx=65_536)
    assert (prompt == again).all()
    total = prompt + output
    assert total.max() <= 65_536 and prompt.min() >= 8 and output.min() >= 1
    assert (
        total.mean() > 1.5 * sorted(total)[len(total) // 2]
    )  # long tail: the mean sits well above the median


# --- one indexed write for many slots
#   ----------------------------------------------------------------------


def test_write_step_matches_one_update_per_slot():
    one, many = (SlotKVCache(2, 4, 6, 2, 3) for _ in range(2))
    for cache in (one, many):
        for r in "abc":
            cache.allocate_slot(r)
        cache.lengths[:3] = [0, 5, 2]
    slots = [2, 0, 1]
    k = [torch.randn(3, 2, 3) for _ in range(2)]
    v = [torch.randn(3, 2, 3) for _ in range(2)]
    for i, s in enumerate(slots):
        view = SlotView(one, s)
        for layer in range(2):
            view.update(layer, k[layer][i : i + 1, None], v[layer][i : i + 1, None])
    write_step(many, slots, k, v)
    for layer in range(2):
        assert torch.equal(one.k[layer], many.k[layer])
        assert torch.equal(one.v[layer], many.v[layer])
    assert many.lengths == [0, 5, 2, 0]  # the offsets stay, as with update


def test_write_rows_stores_at_the_given_offsets_and_gather_rows_reads_them_back():
    cache = SlotKVCache(2, 4, 6, 2, 3)
    rows, offsets = torch.tensor([3, 0, 2]), torch.tensor([5, 1, 0])
    k = [torch.randn(3, 2, 3) for _ in range(2)]
    v = [torch.randn(3, 2, 3) for _ in range(2)]
    write_rows(cache, rows, offsets, k, v)
    assert cache.lengths == [0, 0, 0, 0]  # offsets are the caller's, as with write_step
    gathered = gather_rows(cache, rows, longest=6)
    assert len(gathered) == 2
    for layer, (k_all, v_all) in enumerate(gathered):
        assert k_all.shape == (3, 6, 2, 3)  # [N, longest, kv_heads, head_dim]
        for i, (r, o) in enumerate(zip(rows.tolist(), offsets.tolist())):
            assert torch.equal(k_all[i, o], k[layer][i]) and torch.equal(
                v_all[i, o], v[layer][i]
            )
            assert torch.equal(k_all[i], cache.k[layer][r, :6])
        assert int((k_all != 0).any(-1).any(-1).sum()) == 3  # nothing written elsewhere
    short = gather_rows(cache, rows, longest=2)[0][0]
    assert short.shape == (3, 2, 2, 3) and torch.equal(short[1, 1], k[0][1])


@pytest.mark.parametrize(
    "slots, lengths, message",
    [
        ([1, 1], [0, 0, 0], "appears twice"),
        ([0, 3], [0, 0, 0], "does not exist"),
        ([0, 2], [0, 0, 6], "max_ctx=6"),
    ],
)
def test_write_step_checks_every_slot_before_writing(slots, lengths, message):
    cache = SlotKVCache(1, 3, 6, 1, 2)
    cache.lengths[:] = lengths
    new = [torch.ones(len(slots), 1, 2)]
    with pytest.raises(ValueError, match=message):
        write_step(cache, slots, new, new)
    assert not cache.k[0].any() and not cache.v[0].any()


def test_slot_view_offers_what_forward_cached_reads_and_its_docstring_names_it():
    cache = SlotKVCache(1, 2, 8, 1, 4)
    cache.allocate_slot("a"), cache.allocate_slot("b")
    view = cache.view("b")
    assert (view.length, view.max_len) == (0, 8)  # max_len is the slot's capacity, max_ctx
    view.advance(3)
    assert cache.lengths == [0, 3] and view.length == 3
    for member in ["length", "max_len", "update", "attend", "advance"]:
        assert f"`.{member}" in SlotView.__doc__, f"SlotView's docstring omits .{member}"


# --- every running slot in one forward
#   ---------------------------------------------------------------------


def test_one_forward_decode_gives_the_serial_runs_tokens(small):
    """Slots of different lengths, one of them reused (stale K/V past its length), decoded
    together: the same tokens as one forward per request, logits equal to rounding."""
    specs = [("a", list(range(1, 21)), 3), ("b", [7, 8], 5), ("c", [3, 1, 4, 1, 5], 4)]
    runs = {}
    for step in (batch_decode_step, one_forward_decode_step):
        cache = SlotKVCache.for_model(small, max_batch=2, max_ctx=32)
        reqs = [SlotRequest(*spec) for spec in specs]
        waiting, running = list(reqs), []
        while waiting or running:
            while waiting and cache.num_free:  # c takes a's slot once a is done
                batch_prefill(small, cache, [waiting[0]])
                running.append(waiting.pop(0))
            step(small, cache, running)
            running = [r for r in running if not r.finished]
        runs[step] = reqs
        assert cache.num_free == 2
    serial, batched = runs.values()
    for s, b in zip(serial, batched):
        assert b.generated == s.generated, f"request {b.request_id}"
        assert (torch.stack(b.logits) - torch.stack(s.logits)).abs().max().item() < 1e-4


def test_one_forward_decode_masks_each_slot_past_its_length(small):
    """Garbage past a slot's length (what the padding holds) must not change its logits."""
    logits = []
    for garbage in (0.0, 1e4):
        cache = SlotKVCache.for_model(small, max_batch=2, max_ctx=16)
        reqs = [SlotRequest("long", list(range(1, 11)), 2), SlotRequest("short", [5], 2)]
        batch_prefill(small, cache, reqs)
        for layer in range(len(cache.k)):  # the short slot's padding positions
            cache.k[layer][1, 1:] = garbage
            cache.v[layer][1, 1:] = garbage
        lens = one_forward_decode_step(small, cache, reqs)
        assert lens == [11, 2]
        logits.append(reqs[1].logits[-1])
    assert torch.equal(logits[0], logits[1])


def test_one_forward_decode_checks_before_writing(small):
    cache = SlotKVCache.for_model(small, max_batch=2, max_ctx=4)
    full, empty = SlotRequest("full", [1, 2, 3, 4], 3), SlotRequest("empty", [1], 3)
    batch_prefill(small, cache, [full])
    before = [t.clone() for t in cache.k]
    with pytest.raises(ValueError, match="max_ctx=4"):
        one_forward_decode_step(small, cache, [full])
    cache.allocate_slot("empty")
    with pytest.raises(ValueError, match="request 'empty' has an empty slot 1"):
        one_forward_decode_step(small, cache, [full, empty])
    assert cache.lengths == [4, 0] and all(torch.equal(a, b) for a, b in zip(before, cache.k))


def test_one_forward_over_private_caches_gives_the_serial_runs_tokens(small):
    """N private chapter-2 caches of different lengths (one shorter than the longest history,
    so its row is padded) decoded in one forward: each request's tokens equal `generate`'s."""
    specs = [(list(range(1, 21)), 4, 32), ([7, 8], 4, 8), ([3, 1, 4, 1, 5], 4, 12)]
    caches, tokens = [], []
    for prompt, _, max_len in specs:
        caches.append(KVCache.for_model(small, max_len=max_len))
        logits = forward_cached(small, caches[-1], torch.tensor([prompt]))[0]
        tokens.append([int(logits.argmax())])
    for _ in range(3):
        batch = PrivateBatchView(caches)
        ids = torch.tensor([t[-1] for t in tokens])[:, None]  # [N, 1]
        pos = torch.tensor([c.length for c in caches])[:, None]
        with torch.no_grad():
            logits = small(ids, pos, batch, logits_indices=[-1])  # [N, 1, V]
        batch.advance()
        for t, row in zip(tokens, logits[:, -1]):
            t.append(int(row.argmax()))
    for (prompt, max_new, _), t in zip(specs, tokens):
        assert t == generate(small, prompt, max_new)
    assert [c.length for c in caches] == [23, 5, 8]


# --- chapter 3's measurement helpers (minillm/notebook/slot_timing.py, arena.py)
#   ----------------------------------------------------------------------


def test_decode_ways_run_one_step_three_ways_to_the_same_tokens(small):
    from minillm.notebook.slot_timing import decode_ways

    lens, ways = decode_ways(small, 3)
    assert len(lens) == 3 and all(1 <= n < 200 for n in lens)
    tokens = [ways[w]()[:, -1].argmax(-1) for w in ["serial", "shared", "private"]]
    assert all(torch.equal(tokens[0], t) for t in tokens[1:])
    ways["write, shared"](), ways["write, private"]()
    for (k1, v1), (kn, vn) in zip(ways["gather, shared"](), ways["gather, private"]()):
        assert torch.equal(k1, kn) and torch.equal(v1, vn)


def test_count_ops_sees_one_write_per_layer_and_buffer_shared_and_n_private(small):
    from minillm.notebook.slot_timing import count_ops, decode_ways

    _, ways = decode_ways(small, 4)
    layers_kv = 2 * small.cfg.num_hidden_layers
    assert count_ops(ways["shared"]).writes == layers_kv
    assert count_ops(ways["private"]).writes == 4 * layers_kv


def test_first_fit_takes_the_lowest_hole_large_enough():
    from minillm.notebook.arena import first_fit

    running = [(9, 0, 2), (9, 4, 2), (9, 8, 2)]  # holes of 2 at 2 and 6, none after 10 of 10
    assert first_fit(running, 2, arena=10) == 2
    assert first_fit(running, 3, arena=10) is None
    assert first_fit([], 10, arena=10) == 0


def test_fragmented_arena_refuses_a_request_that_joined_holes_admit():
    from minillm.notebook.arena import fill_arena

    # A, B, C fill the arena; A and C leave first, freeing 2 + 2 tokens in two holes; D needs 4
    need, hold = [2, 2, 2, 4], [1, 5, 1, 1]
    ff_running, ff_refused = fill_arena(need, hold, arena=6, holes_join=False)
    joined_running, joined_refused = fill_arena(need, hold, arena=6, holes_join=True)
    assert (ff_refused, joined_refused) == (1, 0)
    assert ff_running < joined_running
