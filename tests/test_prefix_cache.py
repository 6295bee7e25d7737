"""Prefix caching without a model: the hash chain, lookups, the last-token rule, reference
counts, the LRU
free queue, collisions, and (property test) a scheduler whose blocks hold a shadow of what each
token's K/V depends on, so that every hit is checked against what the request would have
computed itself.
"""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minillm.paged import BlockPool
from minillm.prefix_caching.kv_cache_manager import (
    FreeBlockQueue,
    KVCacheManager,
    hash_block_tokens,
    hash_request_tokens,
)
from minillm.sampling import SamplingParams
from minillm.scheduler import Scheduler, Sequence


def seq(rid, tokens, max_tokens=4, salt=None):
    return Sequence(rid, list(tokens), SamplingParams(max_tokens=max_tokens), cache_salt=salt)


def manager(num_blocks=16, block_size=4, **kw):
    return KVCacheManager(BlockPool(num_blocks), block_size, enable_caching=True, **kw)


def run_to_end(m, s):
    """Admit s with its cached prefix, compute all of its tokens, file its blocks; returns the
    hit length."""
    blocks, hit = m.get_computed_blocks(s)
    assert m.allocate_slots(s, s.num_tokens, blocks)
    s.num_computed = s.num_tokens
    m.cache_full_blocks(s)
    return hit


# ---- the hash chain
#   -------------------------------------------------------------------------------------


def test_a_changed_token_changes_its_block_digest_and_every_later_one():
    tokens = list(range(100, 120))
    base = hash_request_tokens(tokens, 4)
    changed = list(tokens)
    changed[9] += 1  # in block 2 of 5
    other = hash_request_tokens(changed, 4)
    assert len(base) == 5 and base[:2] == other[:2]
    assert all(a != b for a, b in zip(base[2:], other[2:]))


def test_the_salt_enters_the_first_digest_and_so_every_digest():
    tokens = list(range(12))
    plain, salted, salted2 = (
        hash_request_tokens(tokens, 4, s) for s in (None, "tenant-a", "tenant-b")
    )
    assert len({*plain, *salted, *salted2}) == 9
    assert salted[1] == hash_block_tokens(salted[0], tokens[4:8]), (
        "only block 0 takes the salt itself"
    )


def test_only_full_blocks_have_digests():
    assert len(hash_request_tokens(list(range(11)), 4)) == 2
    assert hash_request_tokens([1, 2, 3], 4) == []


def test_digests_are_sha256_not_python_hash():
    # A fixed value: Python's hash() of a tuple changes between processes and versions, sha256
    # never does.
    assert hash_block_tokens(None, [1, 2, 3, 4]) == hash_block_tokens(None, (1, 2, 3, 4))
    assert hash_block_tokens(None, [1, 2, 3, 4]) != hash_block_tokens(0, [1, 2, 3, 4])


# ---- lookups and the last-token rule
#   ----------------------------------------------------------------------


def test_a_second_request_finds_the_full_blocks_of_the_first():
    m = manager()
    a, b = (
        seq("a", range(1, 12)),
        seq("b", list(range(1, 10)) + [99, 98]),
    )  # 11 tokens, 9 shared
    run_to_end(m, a)
    blocks, hit = m.get_computed_blocks(b)
    assert (blocks, hit) == (a.block_table[:2], 8), (
        "two full blocks match; block 2 differs at its 2nd token"
    )


@pytest.mark.parametrize("length, expected_hit", [(12, 8), (13, 12), (11, 8), (4, 0), (5, 4)])
def test_the_last_token_is_always_computed(length, expected_hit):
    """A prompt cached in full still computes its last token; on a block boundary that costs the
    whole last block."""
    m = manager()
    tokens = list(range(1, 40))
    run_to_end(m, seq("warm", tokens[:20]))
    _, hit = m.get_computed_blocks(seq("again", tokens[:length]))
    assert hit == expected_hit


def test_a_hit_shares_blocks_and_counts_owners():
    m = manager(num_blocks=8)
    a = seq("a", range(1, 10))
    run_to_end(m, a)
    b = seq("b", range(1, 10))
    blocks, hit = m.get_computed_blocks(b)
    assert m.allocate_slots(b, 9, blocks)
    assert b.block_table[:2] == a.block_table[:2] and b.block_table[2] != a.block_table[2]
    assert [m.pool.ref_counts[x] for x in a.block_table] == [2, 2, 1]
    assert m.pool.num_free == 8 - 4


def test_salted_requests_share_only_with_the_same_salt():
    m = manager()
    run_to_end(m, seq("a", range(1, 10), salt="alice"))
    assert m.get_computed_blocks(seq("b", range(1, 10), salt="bob"))[1] == 0
    assert m.get_computed_blocks(seq("c", range(1, 10)))[1] == 0
    assert m.get_computed_blocks(seq("d", range(1, 10), salt="alice"))[1] == 8


def test_caching_off_finds_nothing_and_files_nothing():
    m = KVCacheManager(BlockPool(8), 4, enable_caching=False)
    run_to_end(m, seq("a", range(1, 10)))
    assert m.get_computed_blocks(seq("b", range(1, 10))) == ([], 0) and m.num_cached_blocks == 0


# ---- freeing, the LRU queue, eviction
#   -------------------------------------------------------------------------


def test_freed_blocks_stay_findable_and_the_tail_is_evicted_first():
    m = manager(num_blocks=5)
    a = seq("a", range(1, 17))  # exactly 4 full blocks
    run_to_end(m, a)
    table = list(a.block_table)
    m.free(a)
    assert list(m.pool.free_blocks)[-4:] == table[::-1], (
        "freed last block first: the tail is nearer the front"
    )
    assert m.pool.num_free == 5 and m.num_cached_blocks == 4
    blocks_before = m.lookup(list(range(1, 17)))
    filler = seq("filler", [500] * 8)  # needs 2 blocks: the never-used one, then a's last block
    assert m.allocate_slots(filler, 8)
    assert m.lookup(list(range(1, 17))) == blocks_before[:3], (
        "the tail block went first, the head stays"
    )


def test_a_hit_on_a_free_block_takes_it_out_of_the_queue():
    m = manager(num_blocks=4)
    a = seq("a", range(1, 10))
    run_to_end(m, a)
    m.free(a)
    b = seq("b", range(1, 10))
    blocks, _ = m.get_computed_blocks(b)
    assert m.allocate_slots(b, 9, blocks)
    assert not any(x in m.pool.free_blocks for x in blocks) and all(
        m.pool.ref_counts[x] == 1 for x in blocks
    )
    assert m.pool.num_free == 4 - 3


def test_allocation_counts_revived_blocks_against_the_pool():
    """A hit on free blocks uses them up: a request needing them plus new blocks beyond the pool
    is refused whole."""
    m = manager(num_blocks=3)
    a = seq("a", range(1, 10))
    run_to_end(m, a)  # 3 blocks, 2 of them full and filed
    m.free(a)
    b = seq(
        "b", list(range(1, 9)) + list(range(50, 58))
    )  # hits 2 blocks, then needs 2 more: 4 > 3
    blocks, hit = m.get_computed_blocks(b)
    before = (list(m.pool.free_blocks), list(m.pool.ref_counts))
    assert hit == 8 and not m.allocate_slots(b, 16, blocks)
    assert (list(m.pool.free_blocks), list(m.pool.ref_counts), b.block_table) == (*before, [])


def test_reset_forgets_everything_but_only_when_nothing_is_held():
    m = manager()
    a = seq("a", range(1, 10))
    run_to_end(m, a)
    assert not m.reset()
    m.free(a)
    assert (
        m.reset()
        and m.num_cached_blocks == 0
        and m.get_computed_blocks(seq("b", range(1, 10)))[1] == 0
    )


# ---- collisions can only cost hits
#   ---------------------------------------------------------------------------


def test_every_digest_colliding_still_gives_exact_hits_only():
    """With a digest that is always 0, lookups still find exactly the blocks whose tokens and
    parents match."""
    m = manager(num_blocks=32, hash_fn=lambda parent, tokens, extra: 0)
    run_to_end(m, seq("a", range(1, 13)))
    run_to_end(
        m, seq("b", [7] * 4 + list(range(5, 13)))
    )  # block 1 of b has a's tokens, after a different block 0
    assert m.get_computed_blocks(seq("c", list(range(1, 13)) + [0]))[1] == 12
    assert m.get_computed_blocks(seq("d", [7] * 4 + [5, 6, 7, 8, 0]))[1] == 8
    assert m.get_computed_blocks(seq("e", [9] * 4 + [5, 6, 7, 8, 0]))[1] == 0, (
        "block 1 matches only after its own parent"
    )


def test_a_child_of_a_forgotten_block_never_matches():
    """Once a block is overwritten, blocks filed after it must not match a new block filed in
    the same place."""
    m = manager(num_blocks=8)
    a = seq("a", range(1, 13))
    run_to_end(m, a)
    head = a.block_table[0]
    m.free(a)
    m.forget(head)  # as if the pool had handed out block 0 of a's chain first
    m.pool.free_blocks.remove(head)
    m.pool.ref_counts[head] = 1
    new = seq("new", list(range(1, 5)) + [0])
    new.block_table = [head]
    new.num_computed = 4
    m.cache_full_blocks(new)  # the same tokens, filed again in the same block
    assert m.lookup(list(range(1, 13))) == [head], (
        "a's block 1 was filed under the old block 0 and must not match"
    )


def test_a_request_refiles_its_own_copy_when_the_shared_copy_is_evicted():
    m = manager(num_blocks=10)
    a, b = seq("a", range(1, 9)), seq("b", list(range(1, 9)) + list(range(20, 29)))
    for s in (a, b):  # admitted together: neither finds the other's blocks
        assert m.allocate_slots(s, s.num_tokens, [])
    a.num_computed = b.num_computed = 8
    m.cache_full_blocks(a)
    m.cache_full_blocks(b)  # b's copies of the two blocks stay unfiled: a's stand for them
    m.free(a)
    assert m.allocate_slots(
        seq("x", [0] * 20), 20
    )  # takes every free block: a's filed blocks are evicted
    m.cache_full_blocks(b)  # no new full block: nothing is refiled yet
    assert m.lookup(b.prompt_ids) == [], "b's copies are found only once b fills a new block"
    b.num_computed = 17
    m.cache_full_blocks(b)
    assert m.lookup(b.prompt_ids) == b.block_table[:4], (
        "b's own copies are filed again, and its later blocks after them"
    )


# ---- the queue itself
#   ---------------------------------------------------------------------------------------


def test_free_block_queue_pops_in_order_and_removes_from_the_middle():
    q = FreeBlockQueue([3, 1, 2])
    q.append(7)
    q.remove(1)
    assert [q.popleft() for _ in range(3)] == [3, 2, 7] and len(q) == 0
    with pytest.raises(ValueError, match="already in the free queue"):
        FreeBlockQueue([1]).append(1)


# ---- property test: a scheduler with a shadow KV cache
#   -----------------------------------------------------------


def check_clean(s: Scheduler):
    """Every block free exactly once, no owners left, and the digest index consistent."""
    pool, kv = s.pool, s.kv
    assert sorted(pool.free_blocks) == list(range(pool.num_blocks)), (
        "a block leaked or sits twice in the queue"
    )
    assert pool.ref_counts == [0] * pool.num_blocks
    filed = sorted(b for blocks in kv.cached.values() for b in blocks)
    assert filed == sorted(b for b in range(pool.num_blocks) if kv.block_hash[b] is not None)
    assert not kv.chains


def check_owners(s: Scheduler):
    pool = s.pool
    owners = [0] * pool.num_blocks
    for r in s.running:
        for b in r.block_table:
            owners[b] += 1
    assert owners == pool.ref_counts, (
        "reference counts differ from the block tables that hold each block"
    )
    assert sorted(pool.free_blocks) == [b for b in range(pool.num_blocks) if owners[b] == 0]
    assert all(not w.block_table and w.num_computed == 0 for w in s.waiting)


def shared_prefix_workload(rng, vocab=50):
    """Prompts built from a few shared heads and a few tails: many full-block and partial-block
    overlaps."""
    heads = [[rng.randrange(vocab) for _ in range(rng.randint(1, 20))] for _ in range(3)]
    work = []
    for _ in range(rng.randint(4, 16)):
        p = rng.choice(heads) + [rng.randrange(vocab) for _ in range(rng.randint(0, 12))]
        if rng.random() < 0.3 and work:
            p = (
                work[rng.randrange(len(work))][0] + p[:3]
            )  # a "next turn": an earlier prompt plus more
        work.append((p or [1], rng.randint(1, 8)))
    return work


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    block_size=st.sampled_from([1, 2, 3, 4, 8]),
    num_blocks=st.integers(12, 60),
    budget=st.integers(1, 40),
    max_seqs=st.integers(1, 6),
    salted=st.booleans(),
)
def test_every_hit_holds_exactly_the_tokens_the_request_would_compute(
    seed, block_size, num_blocks, budget, max_seqs, salted
):
    """A shadow of the KV cache: each slot holds (salt, all tokens up to its position), which is
    what its K/V depend on.

    Every step, the positions a request reads must hold its own history, and the blocks it
    writes must be its own and unfiled; requests are preempted (small pools) and aborted at
    random; at the end everything is free.
    """
    rng = random.Random(seed)
    s = Scheduler(
        BlockPool(num_blocks),
        block_size,
        budget,
        max_seqs,
        max_model_len=200,
        enable_prefix_caching=True,
    )
    shadow = {}  # slot -> (salt, tokens[0..p])
    pending = []
    for i, (p, m) in enumerate(shared_prefix_workload(rng)):
        q = Sequence(
            f"r{i}",
            p,
            SamplingParams(max_tokens=m),
            cache_salt=rng.choice(["x", "y"]) if salted else None,
        )
        try:
            s.add(q)
            pending.append(q)
        except ValueError:
            pass  # too long for this pool: rejected up front
    for _ in range(2000):
        if not s.has_unfinished():
            break
        if rng.random() < 0.05 and (s.running or s.waiting):
            victim = rng.choice(list(s.running) + list(s.waiting))
            assert s.abort(victim.request_id) is victim and victim.block_table == []
        plan = s.schedule()
        by_id = {r.request_id: r for r in s.running}
        for c in plan.chunks:
            r = by_id[c.request_id]
            for pos in range(
                c.num_computed
            ):  # what attention reads: must be this request's own history
                slot = r.block_table[pos // block_size] * block_size + pos % block_size
                assert shadow.get(slot) == (r.cache_salt, tuple(r.tokens(0, pos + 1))), (
                    f"{r.request_id} reads a wrong slot"
                )
            for pos in range(
                c.num_computed, c.num_computed + c.num_new
            ):  # what it writes: its own, unfiled blocks
                b = r.block_table[pos // block_size]
                assert s.pool.ref_counts[b] == 1 and s.kv.block_hash[b] is None, (
                    "a write into a shared or cached block"
                )
                shadow[b * block_size + pos % block_size] = (
                    r.cache_salt,
                    tuple(r.tokens(0, pos + 1)),
                )
        sampled = {c.request_id: rng.randrange(50) for c in plan.chunks if c.need_logits}
        s.update(plan, sampled)
        check_owners(s)
        assert plan.cache.num_computed_tokens == plan.num_tokens
    assert not s.has_unfinished()
    check_clean(s)
