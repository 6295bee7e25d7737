"""Tests for admit: the task's example, one rule at a time by hand, then random queues against a
reader who walks the rules block by block."""

import copy
import random

from grading import check_equal


def by_the_rules(waiting, ref_counts, num_free, block_size, token_budget, free_seats):
    """The reference: the rules of the task, one block at a time."""
    owners = dict(ref_counts)
    out = []
    for rid, n, cached in waiting:
        if not free_seats or not token_budget:
            break
        hit = []
        for i, b in enumerate(cached):
            if (i + 1) * block_size <= n - 1:  # the block ends before the last token
                hit.append(b)
        start = len(hit) * block_size
        new = min(n - start, token_budget)
        cost = sum(1 for b in hit if owners.get(b, 0) == 0)
        end, blocks = start + new, len(hit)
        while blocks * block_size < end:
            blocks += 1
            cost += 1
        if cost > num_free:
            break
        for b in hit:
            owners[b] = owners.get(b, 0) + 1
        num_free, token_budget, free_seats = num_free - cost, token_budget - new, free_seats - 1
        out.append((rid, start, new))
    return out


def call(learner, *args):
    before = copy.deepcopy(args)
    got = learner.admit(*args)
    check_equal(list(args), list(before), "the arguments after the call (they must not change)")
    return [tuple(x) for x in got]


def test_the_task_example(learner):
    got = call(learner, [("a", 48, [7, 8, 9]), ("b", 20, [])], {7: 1, 8: 1, 9: 0}, 4, 16, 30, 4)
    check_equal(got, [("a", 32, 16), ("b", 0, 14)], "admit(the task's example)")


def test_the_last_token_is_always_computed(learner):
    """A 32-token prompt whose 2 blocks are cached keeps 1: block 1 holds its last token."""
    got = call(learner, [("a", 32, [3, 4])], {3: 1, 4: 1}, 8, 16, 100, 4)
    check_equal(got, [("a", 16, 16)], "admit of a 32-token prompt with both blocks cached")


def test_hit_tokens_cost_no_budget(learner):
    """100 tokens, 96 cached: 4 to compute fit a budget of 4."""
    cached = list(range(10, 16))
    got = call(learner, [("a", 100, cached)], dict.fromkeys(cached, 1), 1, 16, 4, 4)
    check_equal(got, [("a", 96, 4)], "admit with a budget of 4 and 96 tokens cached")


def test_a_hit_on_a_free_block_costs_a_free_block(learner):
    """Block 5 sits in the free queue: taking it out uses the only free block, so the new block
    the request also needs is not there."""
    got = call(learner, [("a", 20, [5])], {5: 0}, 1, 16, 100, 4)
    check_equal(got, [], "admit when the hit block and one new block need 2 of 1 free")
    got = call(learner, [("a", 20, [5])], {5: 0}, 2, 16, 100, 4)
    check_equal(got, [("a", 16, 4)], "the same with 2 free blocks")


def test_a_block_revived_once_is_paid_once(learner):
    """Two requests hit free block 5 in the same step: the first takes it out of the queue, the
    second shares it."""
    waiting = [("a", 20, [5]), ("b", 24, [5])]
    got = call(learner, waiting, {5: 0}, 3, 16, 100, 4)
    check_equal(got, [("a", 16, 4), ("b", 16, 8)], "admit of two requests sharing free block 5")


def test_nobody_overtakes_the_head_of_the_queue(learner):
    """The first request does not fit; the second would, and still waits."""
    got = call(learner, [("big", 200, []), ("small", 8, [])], {}, 5, 16, 1000, 4)
    check_equal(got, [], "admit when the head needs 13 blocks of 5 free")


def test_seats_and_budget_end_admission(learner):
    got = call(learner, [("a", 8, []), ("b", 8, []), ("c", 8, [])], {}, 10, 16, 100, 2)
    check_equal(got, [("a", 0, 8), ("b", 0, 8)], "admit with 2 free seats")
    got = call(learner, [("a", 30, []), ("b", 8, [])], {}, 10, 16, 30, 4)
    check_equal(got, [("a", 0, 30)], "admit when the first uses the whole budget")


def test_random_queues(learner):
    rng = random.Random(4)
    for trial in range(300):
        bs = rng.choice([1, 2, 4, 16])
        pool = list(range(rng.randint(1, 12)))
        ref = {b: rng.choice([0, 0, 1, 2]) for b in pool}
        waiting = []
        for k in range(rng.randint(1, 6)):
            n = rng.randint(1, 12 * bs)
            cached = rng.sample(pool, rng.randint(0, min(len(pool), n // bs + 1)))
            waiting.append((f"r{k}", n, cached))
        args = (
            waiting,
            ref,
            rng.randint(0, 20),
            bs,
            rng.randint(1, 10 * bs),
            rng.randint(1, 6),
        )
        check_equal(call(learner, *args), by_the_rules(*args), f"trial {trial}: admit{args!r}")
