"""Tests for BlockPool: all-or-nothing allocation, owners, double frees, and errors that change nothing."""

import random

from grading import check_equal, check_raises, fail


def test_allocate_returns_distinct_valid_blocks(learner):
    """allocate(n) gives n different ids in 0 .. num_blocks-1, each taken out of the free set."""
    pool = learner.BlockPool(8)
    blocks = pool.allocate(3) + pool.allocate(5)
    check_equal(sorted(blocks), list(range(8)), "the 8 blocks of allocate(3) + allocate(5) on a pool of 8, sorted")
    check_equal(pool.num_free, 0, "num_free after allocating every block")
    check_equal(pool.allocate(0), [], "allocate(0)")


def test_allocation_is_all_or_nothing(learner):
    """Check n <= num_free before taking any block; raise OutOfBlocksError otherwise."""
    pool = learner.BlockPool(4)
    pool.allocate(3)
    check_raises(learner.OutOfBlocksError, pool.allocate, 2, what="allocate(2) with 1 block free")
    check_equal(pool.num_free, 1, "num_free after the refused allocate(2)")
    check_equal(len(pool.allocate(1)), 1, "the length of allocate(1) after the refusal")


def test_freed_blocks_can_be_allocated_again(learner):
    """A freed block goes back to the pool."""
    pool = learner.BlockPool(2)
    a = pool.allocate(2)
    pool.free(a[:1])
    check_equal(pool.num_free, 1, "num_free after freeing one of two blocks")
    check_equal(pool.allocate(1), a[:1], "the block allocate(1) returns after it was freed")


def test_double_free_raises_and_changes_nothing(learner):
    """Freeing a block that has no owner left is a bug in the caller: ValueError, pool unchanged."""
    pool = learner.BlockPool(4)
    a, b = pool.allocate(1), pool.allocate(1)
    pool.free(a)
    check_raises(ValueError, pool.free, a, what=f"free({a}) a second time")
    check_equal(pool.num_free, 3, "num_free after the refused double free")
    check_raises(ValueError, pool.free, b + b, what=f"free({b + b}) of a block with one owner")
    check_equal([pool.ref_count(b[0]), pool.num_free], [1, 3], f"[ref_count({b[0]}), num_free] after free({b + b})")


def test_a_bad_free_releases_none_of_its_blocks(learner):
    """Check every block of the call before releasing any: free([good, bad]) must keep `good`."""
    pool = learner.BlockPool(4)
    good = pool.allocate(1)
    check_raises(ValueError, pool.free, good + [3 if good[0] != 3 else 2], what="free([allocated, free])")
    check_equal(pool.ref_count(good[0]), 1, f"ref_count({good[0]}) after the refused free")
    check_equal(pool.num_free, 3, "num_free after the refused free")


def test_block_ids_outside_the_pool_raise_value_error(learner):
    """Ids are 0 .. num_blocks-1; anything else (like -1 or num_blocks) is a ValueError, not an IndexError."""
    pool = learner.BlockPool(4)
    pool.allocate(4)
    check_raises(ValueError, pool.free, [4], what="free([4]) on a pool of 4")
    check_raises(ValueError, pool.free, [-1], what="free([-1])")
    check_equal(pool.num_free, 0, "num_free after the refused frees")
    check_raises(ValueError, pool.allocate, -1, what="allocate(-1)")


def test_shared_block_returns_after_its_last_owner(learner):
    """share adds an owner; the block stays allocated until every owner has freed it."""
    pool = learner.BlockPool(2)
    a = pool.allocate(1)
    pool.share(a)
    check_equal(pool.ref_count(a[0]), 2, f"ref_count({a[0]}) after share")
    pool.free(a)
    check_equal([pool.ref_count(a[0]), pool.num_free], [1, 1], "[ref_count, num_free] after the first owner frees")
    pool.free(a)
    check_equal([pool.ref_count(a[0]), pool.num_free], [0, 2], "[ref_count, num_free] after the last owner frees")


def test_only_allocated_blocks_can_be_shared(learner):
    """Sharing a free block would let two requests believe they own memory nobody allocated."""
    pool = learner.BlockPool(2)
    a = pool.allocate(1)
    free_block = 1 - a[0]
    check_raises(ValueError, pool.share, a + [free_block], what=f"share({a + [free_block]}) where {free_block} is free")
    check_equal(pool.ref_count(a[0]), 1, f"ref_count({a[0]}) after the refused share")


def test_random_workload_never_hands_out_a_block_twice(learner):
    """Under any mix of allocate/share/free, an allocated block is never handed out again until freed."""
    rng = random.Random(0)
    pool, owned = learner.BlockPool(16), []  # owned: one list of blocks per owner
    for step in range(400):
        op = rng.choice(["allocate", "allocate", "share", "free", "free"])
        if op == "allocate":
            n = rng.randint(0, 6)
            if n > pool.num_free:
                check_raises(learner.OutOfBlocksError, pool.allocate, n, what=f"step {step}: allocate({n})")
                continue
            got = pool.allocate(n)
            held = {b for blocks in owned for b in blocks}
            if len(set(got)) != n or held & set(got):
                fail(f"step {step}: allocate({n}) returned {got}, but blocks {sorted(held & set(got))} were "
                     f"still owned (or a block appears twice)")
            owned.append(got)
        elif op == "share" and owned:
            blocks = rng.choice(owned)
            pool.share(blocks)
            owned.append(list(blocks))
        elif op == "free" and owned:
            pool.free(owned.pop(rng.randrange(len(owned))))
        held = [b for blocks in owned for b in blocks]
        check_equal(pool.num_free, 16 - len(set(held)), f"num_free after step {step} ({op})")
