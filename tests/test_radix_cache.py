"""The radix tree (SGLang's design) and the traffic simulation that sets it beside the block
cache."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minillm.prefix_caching.radix_cache import RadixCache
from minillm.prefix_caching.simulator import (
    make_traffic,
    simulate_blocks,
    simulate_radix,
    simulate_scheduling,
)


def test_match_ends_inside_a_node_and_splits_it():
    tree = RadixCache()
    tree.insert([1, 2, 3, 4, 5])
    matched, node = tree.match_prefix([1, 2, 3, 9])
    assert (
        matched == 3
        and node.key == [1, 2, 3]
        and [c.key for c in node.children.values()] == [[4, 5]]
    )
    assert tree.total_size == 5 and tree.num_nodes() == 2, "a split adds a node, never tokens"


def test_insert_returns_the_part_already_cached_and_adds_one_leaf():
    tree = RadixCache()
    assert tree.insert([1, 2, 3]) == 0
    assert tree.insert([1, 2, 4, 5]) == 2
    assert tree.insert([1, 2, 3]) == 3
    assert tree.total_size == 5
    assert tree.pretty() == (
        "[2 tokens: 1 2] lock_ref=0\n  [1 tokens: 3] lock_ref=0\n  [2 tokens: 4 5] lock_ref=0"
    )


def test_locked_paths_survive_eviction_and_the_oldest_leaf_goes_first():
    tree = RadixCache()
    tree.insert([1, 2, 3])
    tree.insert([7, 8])
    tree.insert([1, 2, 9, 9])
    _, node = tree.match_prefix([1, 2, 3])
    tree.inc_lock_ref(node)
    assert tree.protected_size == 3 and tree.evictable_size == 4
    assert tree.evict(1) == 2 and tree.match_prefix([7, 8])[0] == 0, (
        "[7, 8] was used least recently"
    )
    assert tree.evict(100) == 2 and tree.total_size == 3, "only the locked path is left"
    tree.dec_lock_ref(node)
    assert tree.evict(100) == 3 and tree.total_size == 0
    with pytest.raises(ValueError, match="every dec needs an earlier inc"):
        tree.dec_lock_ref(node)


@settings(max_examples=100, deadline=None)
@given(
    seqs=st.lists(
        st.lists(st.integers(0, 3), min_size=1, max_size=12), min_size=1, max_size=20
    ),
    query=st.lists(st.integers(0, 3), max_size=14),
)
def test_match_is_the_longest_common_prefix_with_anything_inserted(seqs, query):
    tree = RadixCache()
    for s in seqs:
        tree.insert(s)

    def lcp(a, b):
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    assert tree.match_prefix(query)[0] == max(lcp(s, query) for s in seqs)
    assert tree.total_size == len({tuple(s[:i]) for s in seqs for i in range(1, len(s) + 1)}), (
        "the tree holds each distinct prefix once"
    )


def test_with_room_for_everything_a_block_hit_is_the_radix_hit_rounded_down_to_a_block():
    traffic = make_traffic(60, seed=3)
    radix = simulate_radix(traffic)
    assert sum(radix.hits) > 0
    for block_size in (1, 4, 16, 64):
        blocks = simulate_blocks(traffic, block_size)
        assert blocks.hits == [(h // block_size) * block_size for h in radix.hits], block_size


def test_less_memory_means_fewer_hits_for_both_designs():
    traffic = make_traffic(80, seed=4)
    for simulate in (
        lambda cap: simulate_radix(traffic, cap),
        lambda cap: simulate_blocks(traffic, 16, cap),
    ):
        rates = [simulate(cap).hit_rate for cap in (2_000, 8_000, None)]
        assert rates[0] < rates[1] <= rates[2]


def test_a_capacity_below_one_request_is_refused():
    traffic = make_traffic(5, seed=1)
    with pytest.raises(ValueError, match="expected capacity_tokens of at least"):
        simulate_blocks(traffic, 16, capacity_tokens=64)
    with pytest.raises(ValueError, match="expected capacity_tokens of at least"):
        simulate_radix(traffic, capacity_tokens=64)


def test_the_traffic_mixes_all_three_kinds_and_chats_grow_turn_by_turn():
    traffic = make_traffic(200, seed=0)
    kinds = {r.kind for r in traffic}
    assert kinds == {"chat", "few-shot", "unrelated"}
    chats = [r for r in traffic if r.kind == "chat"]
    followups = sum(
        any(
            r.prompt[: len(q.prompt) + len(q.output)] == q.prompt + q.output
            for q in chats
            if q is not r
        )
        for r in chats
    )
    assert followups > len(chats) // 3
    assert make_traffic(50, seed=9)[7].prompt == make_traffic(50, seed=9)[7].prompt, "seeded"


def test_one_request_waiting_at_a_time_leaves_no_order_to_choose():
    traffic = make_traffic(60, seed=3)
    plain = simulate_blocks(traffic, 16, 3000)
    for policy in ("fcfs", "lpm"):
        assert simulate_scheduling(traffic, 16, 3000, 1, policy).hits == plain.hits


def test_longest_prefix_first_serves_the_best_cached_request_first():
    """Three waiting requests; the third shares the first one's prompt. LPM serves it second,
    before the unrelated one's K/V evicts the shared blocks; FCFS serves it last, when one
    shared block is left (the pool frees the tail first)."""
    from minillm.prefix_caching.simulator import SimRequest

    shared = list(range(1000, 1064))
    warm = SimRequest("few-shot", shared + [1, 2, 3], [4, 5])
    cold = SimRequest("unrelated", list(range(2000, 2064)) + [6], [7, 8])
    again = SimRequest("few-shot", shared + [9, 9, 9], [5, 6])
    traffic = [warm, cold, again]
    fcfs = simulate_scheduling(traffic, 16, 96, 3, "fcfs")  # 6 blocks: one request's 5, +1
    lpm = simulate_scheduling(traffic, 16, 96, 3, "lpm")
    assert fcfs.hits == [0, 0, 16] and lpm.hits == [0, 0, 64]


def test_a_next_turn_waits_for_the_batch_after_the_turn_it_follows():
    from minillm.prefix_caching.simulator import _follows

    traffic = make_traffic(120, seed=1)
    pairs = [
        (i, j)
        for i in range(len(traffic))
        for j in range(i)
        if _follows(traffic[i], traffic[j])
    ]
    assert any(i // 64 == j // 64 for i, j in pairs), "some arrive in the same batch"
    for policy in ("fcfs", "lpm"):
        result = simulate_scheduling(traffic, 16, 4000, 64, policy)
        assert len(result.hits) == len(traffic)
        assert all(result.served_in[i] > result.served_in[j] for i, j in pairs)
    with pytest.raises(ValueError, match="policy is 'random': expected 'fcfs' or 'lpm'"):
        simulate_scheduling(traffic, 16, 4000, 64, "random")
