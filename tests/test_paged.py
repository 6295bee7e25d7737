"""Chapter 4: the block pool, the slot mapping, and paged attention against dense causal
attention."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from minillm.paged import (
    BlockPool,
    OutOfBlocksError,
    PagedKVCache,
    num_blocks_for,
    paged_attention,
    paged_decode_attention,
    slot_mapping_for,
)

HEAD_DIM = 8
FAST = settings(max_examples=40, deadline=None)


def dense_causal(q_all, k_all, v_all, scale):
    """The reference: plain causal SDPA over a whole contiguous sequence [S, H|KV, hd]."""
    rep = q_all.shape[1] // k_all.shape[1]
    k, v = k_all.repeat_interleave(rep, dim=1), v_all.repeat_interleave(rep, dim=1)
    o = F.scaled_dot_product_attention(
        q_all.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, scale=scale
    )
    return o.transpose(0, 1)  # [S, H, hd]


def build_mix(cached, new, block_size, heads, kv_heads, seed):
    """Random K/V for each request's whole sequence, stored in shuffled blocks; returns what
    attention needs."""
    g = torch.Generator().manual_seed(seed)
    needs = [num_blocks_for(c + n, block_size) for c, n in zip(cached, new)]
    num_blocks = sum(needs) + 3  # a few blocks nobody owns
    ids = list(range(num_blocks))
    random.Random(seed).shuffle(ids)  # non-contiguous, out-of-order blocks
    kv = PagedKVCache(1, num_blocks, block_size, kv_heads, HEAD_DIM)
    tables, qs, expected, query_start_loc = [], [], [], [0]
    for c, n, need in zip(cached, new, needs):
        table, ids = ids[:need], ids[need:]
        S = c + n
        q_all = torch.randn(S, heads, HEAD_DIM, generator=g)
        k_all = torch.randn(S, kv_heads, HEAD_DIM, generator=g)
        v_all = torch.randn(S, kv_heads, HEAD_DIM, generator=g)
        kv.write(
            0, torch.tensor(slot_mapping_for(table, list(range(S)), block_size)), k_all, v_all
        )
        tables.append(table)
        qs.append(q_all[c:])  # only the new tokens are queries this step
        expected.append(dense_causal(q_all, k_all, v_all, HEAD_DIM**-0.5)[c:])
        query_start_loc.append(query_start_loc[-1] + n)
    seq_lens = [c + n for c, n in zip(cached, new)]
    return kv, torch.cat(qs), tables, seq_lens, query_start_loc, torch.cat(expected)


requests = st.lists(st.tuples(st.integers(0, 200), st.integers(1, 64)), min_size=1, max_size=8)
head_layouts = st.sampled_from([(4, 4), (4, 2), (8, 2), (6, 1)])  # MHA, GQA, GQA, MQA


@FAST
@given(requests, st.sampled_from([1, 4, 16]), head_layouts, st.integers(0, 2**31 - 1))
def test_paged_attention_equals_dense_causal_attention(mix, block_size, heads, seed):
    cached, new = [c for c, _ in mix], [n for _, n in mix]
    kv, q, tables, seq_lens, qsl, expected = build_mix(cached, new, block_size, *heads, seed)
    out = paged_attention(q, kv, 0, tables, seq_lens, qsl, HEAD_DIM**-0.5)
    assert (out - expected).abs().max().item() < 1e-5


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(0, 200), min_size=1, max_size=8),
    st.sampled_from([1, 4, 16]),
    head_layouts,
    st.integers(0, 2**31 - 1),
)
def test_vectorised_decode_equals_dense_causal_attention(cached, block_size, heads, seed):
    kv, q, tables, seq_lens, _, expected = build_mix(
        cached, [1] * len(cached), block_size, *heads, seed
    )
    out = paged_decode_attention(q, kv, 0, tables, seq_lens, HEAD_DIM**-0.5)
    assert (out - expected).abs().max().item() < 1e-5


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(0, 200), min_size=2, max_size=8),
    st.sampled_from([1, 4, 16]),
    head_layouts,
    st.sampled_from([float("nan"), float("inf")]),
    st.integers(0, 2**31 - 1),
)
def test_decode_reads_nothing_past_a_request_context(cached, block_size, heads, bad, seed):
    """Every K/V slot no request reads (filler block 0, a last block's tail, free blocks) holds
    NaN or inf: the one-call decode must still equal dense attention, for every request."""
    kv, q, tables, seq_lens, _, expected = build_mix(
        cached, [1] * len(cached), block_size, *heads, seed
    )
    read = torch.zeros(kv.num_slots, dtype=torch.bool)
    for table, n in zip(tables, seq_lens):
        read[slot_mapping_for(table, list(range(n)), block_size)] = True
    flat = (kv.num_slots, kv.num_kv_heads, HEAD_DIM)
    kv.k[0].view(flat)[~read] = bad
    kv.v[0].view(flat)[~read] = bad
    out = paged_decode_attention(q, kv, 0, tables, seq_lens, HEAD_DIM**-0.5)
    assert (out - expected).abs().max().item() < 1e-5


def test_decode_output_is_not_overwritten_by_the_next_decode():
    """decode gathers into buffers the cache keeps; its output must not alias them."""
    kv, q, tables, seq_lens, _, expected = build_mix([30, 7, 90], [1, 1, 1], 4, 4, 2, seed=1)
    first = paged_decode_attention(q, kv, 0, tables, seq_lens, HEAD_DIM**-0.5)
    kept = first.clone()
    paged_decode_attention(q[:1], kv, 0, tables[:1], seq_lens[:1], HEAD_DIM**-0.5)
    paged_decode_attention(q[2:], kv, 0, tables[2:], seq_lens[2:], HEAD_DIM**-0.5)
    assert torch.equal(first, kept)
    assert (first - expected).abs().max().item() < 1e-5


def test_chunk_token_does_not_see_later_tokens_of_its_chunk():
    """A chunk at positions 10..13: the key at 12 matters to tokens 12 and 13, not to 10
    and 11."""
    kv, q, tables, seq_lens, qsl, _ = build_mix([10], [4], 4, 4, 2, seed=1)
    before = paged_attention(q, kv, 0, tables, seq_lens, qsl, 1.0)
    kv.k[0].view(-1, 2, HEAD_DIM)[slot_mapping_for(tables[0], [12], 4)] += 100.0
    after = paged_attention(q, kv, 0, tables, seq_lens, qsl, 1.0)
    assert torch.equal(before[:2], after[:2])
    assert not torch.allclose(before[2:], after[2:])


@FAST
@given(
    st.lists(st.integers(1, 100), min_size=1, max_size=6),
    st.sampled_from([1, 4, 16]),
    st.integers(0, 10**6),
)
def test_write_then_read_returns_each_request_in_position_order(lengths, block_size, seed):
    g = torch.Generator().manual_seed(seed)
    pool = BlockPool(sum(num_blocks_for(n, block_size) for n in lengths) + 2)
    kv = PagedKVCache(2, pool.num_blocks, block_size, 2, HEAD_DIM)
    stored = []
    for n in lengths:
        table = pool.allocate(num_blocks_for(n, block_size))
        k, v = (
            torch.randn(n, 2, HEAD_DIM, generator=g),
            torch.randn(n, 2, HEAD_DIM, generator=g),
        )
        kv.write(1, torch.tensor(slot_mapping_for(table, list(range(n)), block_size)), k, v)
        stored.append((table, k, v))
    for table, k, v in stored:
        k_read, v_read = kv.read(1, table, k.shape[0])
        assert torch.equal(k_read, k) and torch.equal(v_read, v)


# --- the block pool
#   -------------------------------------------------------------------------------


def snapshot(pool: BlockPool):
    return list(pool.ref_counts), list(pool.free_blocks)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("allocate"), st.integers(0, 12)),
        st.tuples(st.just("free"), st.integers(0, 20)),
        st.tuples(st.just("share"), st.integers(0, 20)),
        st.tuples(st.just("double_free"), st.integers(0, 20)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 24), ops)
def test_pool_invariants_hold_under_random_allocate_and_free(num_blocks, operations):
    pool = BlockPool(num_blocks)
    owners: list[list[int]] = []  # each live allocation (or share) as its owner sees it
    freed: list[list[int]] = []
    for op, arg in operations:
        before = snapshot(pool)
        if op == "allocate":
            if arg > pool.num_free:
                with pytest.raises(OutOfBlocksError):
                    pool.allocate(arg)
                assert snapshot(pool) == before  # all or nothing
            else:
                got = pool.allocate(arg)
                assert len(got) == arg
                held = {b for o in owners for b in o}
                assert not held & set(got), "a block was handed out while still held"
                owners.append(got)
        elif op == "free" and owners:
            blocks = owners.pop(arg % len(owners))
            pool.free(blocks)
            freed.append(blocks)
        elif op == "share" and owners:
            blocks = owners[arg % len(owners)]
            pool.share(blocks)
            owners.append(list(blocks))
        elif op == "double_free" and freed:
            blocks = freed[arg % len(freed)]
            still_held = [b for b in blocks if any(b in o for o in owners)]
            if (
                blocks and not still_held
            ):  # those blocks have no owner left: freeing again is a double free
                with pytest.raises(ValueError, match="not allocated"):
                    pool.free(blocks)
                assert snapshot(pool) == before
        # the counts add up, and agree with who holds what
        counts = [0] * num_blocks
        for o in owners:
            for b in o:
                counts[b] += 1
        assert pool.ref_counts == counts
        assert sorted(pool.free_blocks) == [b for b in range(num_blocks) if counts[b] == 0]
        assert pool.num_free + pool.num_allocated == num_blocks


def test_failed_allocation_leaves_pool_unchanged():
    pool = BlockPool(4)
    pool.allocate(3)
    before = snapshot(pool)
    with pytest.raises(OutOfBlocksError, match="asked for 2 blocks but only 1 of 4 are free"):
        pool.allocate(2)
    assert snapshot(pool) == before


def test_double_free_raises_and_changes_nothing():
    pool = BlockPool(4)
    a, b = pool.allocate(2), pool.allocate(1)
    pool.free(a)
    before = snapshot(pool)
    with pytest.raises(ValueError, match=f"block {a[0]} is not allocated"):
        pool.free(b + a)  # b is fine, but a was freed already: nothing may be released
    assert snapshot(pool) == before


def test_shared_block_returns_to_pool_only_when_last_owner_frees():
    pool = BlockPool(2)
    blocks = pool.allocate(1)
    pool.share(blocks)
    pool.free(blocks)
    assert pool.num_free == 1 and pool.ref_counts[blocks[0]] == 1
    pool.free(blocks)
    assert pool.num_free == 2


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda p: p.allocate(-1), "cannot allocate -1 blocks"),
        (lambda p: p.allocate(1.5), "cannot allocate 1.5 blocks"),
        (lambda p: p.free([7]), "block 7 is not a block id"),
        (lambda p: p.free([0]), "block 0 is not allocated"),
        (lambda p: p.share([1]), "block 1 is free"),
    ],
)
def test_bad_pool_calls_raise_and_change_nothing(call, message):
    pool = BlockPool(4)
    before = snapshot(pool)
    with pytest.raises(ValueError, match=message):
        call(pool)
    assert snapshot(pool) == before


def test_free_list_is_first_in_first_out():
    """allocate takes the oldest free block; free appends at the back in call order (chapter 4's
    printed block tables depend on this order)."""
    pool = BlockPool(6)
    assert pool.allocate(4) == [0, 1, 2, 3]
    pool.free([2, 0])
    assert list(pool.free_blocks) == [4, 5, 2, 0]
    assert pool.allocate(3) == [4, 5, 2]


def test_pool_needs_at_least_one_block():
    with pytest.raises(ValueError, match="num_blocks is 0"):
        BlockPool(0)


# --- slot mapping and the cache's own checks
#   ---------------------------------------------------------


def test_slot_mapping_is_block_times_size_plus_offset():
    assert slot_mapping_for([7, 2, 5], [0, 3, 4, 9], block_size=4) == [28, 31, 8, 21]


def test_slot_mapping_names_the_missing_block():
    with pytest.raises(
        ValueError, match="position 40 needs block 2, but the block table has 2 blocks"
    ):
        slot_mapping_for([3, 9], [30, 31, 40], block_size=16)


@pytest.mark.parametrize(
    "positions, block_size, message",
    [
        ([-1], 4, "position -1 is negative"),
        ([0], 0, "block_size is 0"),
    ],
)
def test_slot_mapping_rejects_bad_input(positions, block_size, message):
    with pytest.raises(ValueError, match=message):
        slot_mapping_for([0, 1], positions, block_size)


def test_write_with_a_slot_outside_the_pool_changes_nothing():
    kv = PagedKVCache(1, 2, 4, 2, HEAD_DIM)
    k = torch.ones(2, 2, HEAD_DIM)
    with pytest.raises(ValueError, match="slot 8 is outside the pool"):
        kv.write(0, torch.tensor([1, 8]), k, k)
    assert kv.k[0].abs().sum() == 0


def test_write_rejects_rows_that_do_not_match_the_slot_mapping():
    kv = PagedKVCache(1, 2, 4, 2, HEAD_DIM)
    with pytest.raises(ValueError, match="expected \\(3, 2, 8\\)"):
        kv.write(
            0, torch.tensor([0, 1, 2]), torch.ones(2, 2, HEAD_DIM), torch.ones(2, 2, HEAD_DIM)
        )


def test_read_needs_enough_blocks():
    kv = PagedKVCache(1, 4, 4, 2, HEAD_DIM)
    with pytest.raises(
        ValueError, match=r"block_table has 2 blocks, but 9 tokens need 3 \(block_size 4\)"
    ):
        kv.read(0, [0, 1], 9)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            dict(seq_lens=[3, 5]),
            "request 0 has 4 new tokens \\(query_start_loc 0..4\\) and a context of 3",
        ),
        (
            dict(block_tables=[[0], [2, 3]]),
            "request 0's block table has 1 blocks, but 6 tokens need 2",
        ),
        (dict(block_tables=[[0, 9], [2, 3]]), "request 0's block table holds block 9"),
        (
            dict(query_start_loc=[0, 4, 6]),
            "q has shape \\(5, 4, 8\\): expected \\[6, heads, head_dim\\]",
        ),
        (dict(query_start_loc=[1, 4, 5]), "query_start_loc starts at 1: expected 0"),
        (dict(seq_lens=[6]), "1 seq_lens, 2 block tables and 3 query_start_loc entries"),
        (dict(q=torch.zeros(5, 3, HEAD_DIM)), "q has 3 heads of dim 8"),
    ],
)
def test_paged_attention_rejects_inconsistent_metadata(change, message):
    kv = PagedKVCache(1, 4, 4, 2, HEAD_DIM)
    args = dict(
        q=torch.zeros(5, 4, HEAD_DIM),
        block_tables=[[0, 1], [2, 3]],
        seq_lens=[6, 5],
        query_start_loc=[0, 4, 5],
    )
    args.update(change)
    with pytest.raises(ValueError, match=message):
        paged_attention(
            args["q"],
            kv,
            0,
            args["block_tables"],
            args["seq_lens"],
            args["query_start_loc"],
            1.0,
        )


# --- every public call checks its arguments and changes nothing when they are wrong
#   ----------------------


def _kv():
    kv = PagedKVCache(2, 4, 4, 2, HEAD_DIM)
    kv.write(0, [0, 1], torch.ones(2, 2, HEAD_DIM), torch.ones(2, 2, HEAD_DIM))
    return kv


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda kv: kv.write(
                0, [3, 3], torch.ones(2, 2, HEAD_DIM), torch.ones(2, 2, HEAD_DIM)
            ),
            "slot 3 appears twice",
        ),
        (
            lambda kv: kv.write(
                -1, [3], torch.ones(1, 2, HEAD_DIM), torch.ones(1, 2, HEAD_DIM)
            ),
            "layer is -1: expected an int >= 0 and <= 1",
        ),
        (
            lambda kv: kv.write(2, [3], torch.ones(1, 2, HEAD_DIM), torch.ones(1, 2, HEAD_DIM)),
            "layer is 2",
        ),
        (
            lambda kv: kv.write(
                0,
                torch.tensor([[3, 4]]),
                torch.ones(2, 2, HEAD_DIM),
                torch.ones(2, 2, HEAD_DIM),
            ),
            r"shape \(1, 2\): expected a 1-D integer tensor",
        ),
        (
            lambda kv: kv.write(
                0, torch.tensor([3.0]), torch.ones(1, 2, HEAD_DIM), torch.ones(1, 2, HEAD_DIM)
            ),
            "torch.float32 tensor",
        ),
        (lambda kv: kv.read(0, [-1], 3), "block_table holds block -1: expected 0 <= block < 4"),
        (lambda kv: kv.read(0, [0, 9], 5), "block_table holds block 9"),
        (lambda kv: kv.read(5, [0], 1), "layer is 5"),
        (lambda kv: kv.read(0, [0], -2), "length is -2"),
        (lambda kv: kv.read(0, [0.5], 1), r"block_table\[0\] is 0.5: expected an int"),
    ],
)
def test_bad_cache_calls_raise_and_change_nothing(call, message):
    kv = _kv()
    before = [t.clone() for t in kv.k + kv.v]
    with pytest.raises(ValueError, match=message):
        call(kv)
    assert all(torch.equal(a, b) for a, b in zip(before, kv.k + kv.v))


@pytest.mark.parametrize(
    "args, message",
    [
        ((1, 0, 4, 2, 8), "num_blocks is 0: expected an int >= 1"),
        ((1, 4, 2.5, 2, 8), "block_size is 2.5: expected an int >= 1"),
        ((1, 4, True, 2, 8), "block_size is True"),
        ((0, 4, 4, 2, 8), "num_layers is 0"),
        ((1, 4, 4, -2, 8), "num_kv_heads is -2"),
    ],
)
def test_cache_constructor_names_the_bad_argument(args, message):
    with pytest.raises(ValueError, match=message):
        PagedKVCache(*args)


def test_pool_takes_numpy_integers_like_the_runner():
    import numpy as np

    pool = BlockPool(np.int64(4))
    blocks = pool.allocate(np.int32(2))
    pool.share([np.int64(b) for b in blocks])
    pool.free(np.array(blocks))
    pool.free(blocks)
    assert pool.num_free == 4 and all(isinstance(b, int) for b in pool.free_blocks)
