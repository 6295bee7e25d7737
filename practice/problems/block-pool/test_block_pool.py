"""Tests for BlockPool: all-or-nothing allocation, owners, a first-in-first-out free list,
double frees, errors that name the block and change nothing; then random workloads on pools of
any size against a model of the rules."""

import random

import pytest
from grading import check_equal, check_names, check_raises, fail


def state(pool, num_blocks):
    """Everything the pool promises about itself: its free list in order and each block's
    owners."""
    return {
        "num_blocks": pool.num_blocks,
        "num_free": pool.num_free,
        "num_allocated": pool.num_allocated,
        "free_blocks": list(pool.free_blocks),
        "ref_counts": list(pool.ref_counts),
    }


def expected_state(owners, free_order):
    return {
        "num_blocks": len(owners),
        "num_free": len(free_order),
        "num_allocated": len(owners) - len(free_order),
        "free_blocks": list(free_order),
        "ref_counts": list(owners),
    }


def test_allocate_returns_distinct_valid_blocks(learner):
    """allocate(n) gives n different ids in 0 .. num_blocks-1, each taken out of the free
    set."""
    pool = learner.BlockPool(11)
    blocks = pool.allocate(3) + pool.allocate(8)
    check_equal(
        sorted(blocks),
        list(range(11)),
        "the 11 blocks of allocate(3) + allocate(8) on a pool of 11, sorted",
    )
    check_equal(pool.num_free, 0, "num_free after allocating every block")
    check_equal(pool.allocate(0), [], "allocate(0)")


def test_every_pool_size_is_honoured(learner):
    """A pool of num_blocks blocks hands out exactly that many, for any num_blocks."""
    for n in (1, 3, 17, 64):
        pool = learner.BlockPool(n)
        check_equal(
            [pool.num_free, sorted(pool.allocate(n)), pool.num_free],
            [n, list(range(n)), 0],
            f"[num_free, sorted(allocate({n})), num_free] of BlockPool({n})",
        )


def test_allocation_is_all_or_nothing(learner):
    """Check n <= num_free before taking any block; raise OutOfBlocksError otherwise."""
    pool = learner.BlockPool(6)
    held = pool.allocate(4)
    before = state(pool, 6)
    check_raises(
        learner.OutOfBlocksError, pool.allocate, 3, what="allocate(3) with 2 blocks free"
    )
    check_equal(state(pool, 6), before, "the pool after the refused allocate(3)")
    got = pool.allocate(2)
    check_equal(
        sorted(held + got), list(range(6)), "all blocks after allocate(2) took the last two"
    )


def test_free_list_is_first_in_first_out(learner):
    """allocate takes from the front of the free list; free appends at its back, in call
    order."""
    pool = learner.BlockPool(6)
    check_equal(pool.allocate(4), [0, 1, 2, 3], "allocate(4) on a fresh pool of 6")
    pool.free([2, 0])
    check_equal(
        state(pool, 6),
        expected_state([0, 1, 0, 1, 0, 0], [4, 5, 2, 0]),
        "the pool after allocate(4), free([2, 0])",
    )
    check_equal(pool.allocate(3), [4, 5, 2], "allocate(3) after free([2, 0])")
    check_equal(list(pool.free_blocks), [0], "the free list after allocate(3)")


def test_freed_blocks_can_be_allocated_again(learner):
    """A freed block goes back to the pool."""
    pool = learner.BlockPool(2)
    a = pool.allocate(2)
    pool.free(a[:1])
    check_equal(pool.num_free, 1, "num_free after freeing one of two blocks")
    check_equal(pool.allocate(1), a[:1], "the block allocate(1) returns after it was freed")


def test_double_free_raises_naming_the_block_and_changes_nothing(learner):
    """Freeing a block that has no owner left is a bug in the caller: ValueError naming it, pool
    unchanged."""
    pool = learner.BlockPool(9)
    pool.allocate(5)
    a, b = pool.allocate(1), pool.allocate(1)
    pool.free(a)
    before = state(pool, 9)
    error = check_raises(ValueError, pool.free, a, what=f"free({a}) a second time")
    check_names(error, a[0], f"free({a}) a second time")
    check_equal(state(pool, 9), before, f"the pool after the refused double free of {a}")
    error = check_raises(
        ValueError, pool.free, b + b, what=f"free({b + b}) of a block with one owner"
    )
    check_names(error, b[0], f"free({b + b})")
    check_equal(state(pool, 9), before, f"the pool after the refused free({b + b})")


def test_a_bad_free_releases_none_of_its_blocks(learner):
    """Check every block of the call before releasing any: free([good, good, bad]) must keep the
    good ones."""
    pool = learner.BlockPool(8)
    good = pool.allocate(3)
    free_block = next(b for b in range(8) if b not in good)
    before = state(pool, 8)
    check_raises(
        ValueError,
        pool.free,
        good[:2] + [free_block],
        what=f"free({good[:2] + [free_block]}) where {free_block} is free",
    )
    check_equal(state(pool, 8), before, "the pool after the refused free")


@pytest.mark.parametrize("bad", [-1, 8, 100])
def test_block_ids_outside_the_pool_raise_value_error_naming_them(learner, bad):
    """Ids are 0 .. num_blocks-1; anything else is a ValueError naming the id, not an IndexError
    or a wrap-around."""
    pool = learner.BlockPool(8)
    pool.allocate(8)
    before = state(pool, 8)
    for method in ("free", "share"):
        error = check_raises(
            ValueError,
            getattr(pool, method),
            [3, bad],
            what=f"{method}([3, {bad}]) on a pool of 8",
        )
        check_names(error, bad, f"{method}([3, {bad}])")
        check_equal(state(pool, 8), before, f"the pool after the refused {method}([3, {bad}])")


def test_negative_allocation_raises_value_error_naming_it(learner):
    """allocate(-2) is a mistake in the caller's arithmetic: ValueError naming -2."""
    pool = learner.BlockPool(4)
    error = check_raises(ValueError, pool.allocate, -2, what="allocate(-2)")
    check_names(error, -2, "allocate(-2)")
    check_equal(pool.num_free, 4, "num_free after the refused allocate(-2)")


def test_shared_block_returns_after_its_last_owner(learner):
    """share adds an owner; the block stays allocated until every owner has freed it."""
    pool = learner.BlockPool(3)
    a = pool.allocate(1)
    pool.share(a)
    pool.share(a)
    check_equal(pool.ref_counts[a[0]], 3, f"ref_counts[{a[0]}] after two shares")
    for owners_left in (2, 1, 0):
        pool.free(a)
        check_equal(
            [pool.ref_counts[a[0]], pool.num_free],
            [owners_left, 3 - (owners_left > 0)],
            f"[ref_counts[{a[0]}], num_free] with {owners_left} owners left",
        )


def test_only_allocated_blocks_can_be_shared(learner):
    """Sharing a free block would let two requests believe they own memory nobody allocated."""
    pool = learner.BlockPool(5)
    a = pool.allocate(2)
    free_block = next(b for b in range(5) if b not in a)
    before = state(pool, 5)
    error = check_raises(
        ValueError,
        pool.share,
        a + [free_block],
        what=f"share({a + [free_block]}) where {free_block} is free",
    )
    check_names(error, free_block, f"share({a + [free_block]})")
    check_equal(state(pool, 5), before, "the pool after the refused share")


@pytest.mark.parametrize("seed", range(3))
def test_random_workload_follows_the_rules(learner, seed):
    """Any pool size and any mix of allocate/share/free/bad calls: the pool matches a model of
    owners at every step."""
    rng = random.Random(seed)
    num_blocks = rng.randint(1, 40)
    pool, owners, held = (
        learner.BlockPool(num_blocks),
        [0] * num_blocks,
        [],
    )  # held: one list of blocks per owner
    free_order = list(range(num_blocks))  # the model's free list, first in, first out
    for step in range(150):
        op = rng.choice(["allocate", "allocate", "share", "free", "free", "bad free"])
        what = f"seed {seed}, pool of {num_blocks}, step {step}: {op}"
        if op == "allocate":
            n = rng.randint(0, max(1, num_blocks // 3))
            if n > owners.count(0):
                check_raises(
                    learner.OutOfBlocksError,
                    pool.allocate,
                    n,
                    what=f"{what}({n}) with {owners.count(0)} free",
                )
            else:
                got = pool.allocate(n)
                if (
                    len(got) != n
                    or len(set(got)) != n
                    or any(not 0 <= b < num_blocks or owners[b] for b in got)
                ):
                    fail(
                        f"{what}({n}) returned {got}: expected {n} different free blocks; "
                        f"owners were {owners}"
                    )
                for b in got:
                    owners[b] = 1
                    free_order.remove(b)
                held.append(got)
        elif op == "share" and held:
            blocks = rng.choice(held)
            pool.share(blocks)
            for b in blocks:
                owners[b] += 1
            held.append(list(blocks))
        elif op == "free" and held:
            blocks = held.pop(rng.randrange(len(held)))
            pool.free(blocks)
            for b in blocks:
                owners[b] -= 1
                if owners[b] == 0:
                    free_order.append(b)
        elif op == "bad free":
            b = rng.randrange(num_blocks)
            check_raises(
                ValueError,
                pool.free,
                [b] * (owners[b] + 1),
                what=f"{what} of block {b} ({owners[b]} owners) {owners[b] + 1} times",
            )
        if step % 25 == 24:  # the whole pool now and then; num_free after every step
            check_equal(
                state(pool, num_blocks),
                expected_state(owners, free_order),
                f"the pool after {what}",
            )
        else:
            check_equal(pool.num_free, owners.count(0), f"num_free after {what}")
