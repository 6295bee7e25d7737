"""Tests for num_blocks_needed and slot_mapping_for: by hand, then any block size (powers of two
or not),
shuffled tables, positions in any order and errors anywhere in the list, against
minillm.paged."""

import random

import pytest
from grading import check_equal, check_names, check_raises

from minillm.paged import num_blocks_for, slot_mapping_for


def test_blocks_needed_rounds_up(learner):
    """A partly filled last block still counts: ceil(num_tokens / block_size)."""
    got = [learner.num_blocks_needed(n, 4) for n in (0, 1, 4, 5, 10, 12)]
    check_equal(got, [0, 1, 1, 2, 3, 3], "num_blocks_needed(n, 4) for n = 0, 1, 4, 5, 10, 12")


def test_blocks_needed_for_any_block_size(learner):
    """Ceiling division in integers, for any block size and for contexts of millions of
    tokens."""
    rng = random.Random(0)
    cases = [
        (n, bs)
        for bs in (1, 3, 5, 7, 16, 48)
        for n in (0, 1, bs - 1, bs, bs + 1, 3 * bs, rng.randrange(10**6))
    ]
    cases += [(10**17 + 1, 10**9), (2**60, 3)]
    check_equal(
        [learner.num_blocks_needed(n, bs) for n, bs in cases],
        [num_blocks_for(n, bs) for n, bs in cases],
        f"num_blocks_needed(n, block_size) for (n, block_size) in {cases}",
    )


def test_slots_follow_the_block_table(learner):
    """slot = block_table[p // block_size] * block_size + p % block_size."""
    got = learner.slot_mapping_for([7, 2, 9], list(range(10)), 4)
    check_equal(
        got,
        [28, 29, 30, 31, 8, 9, 10, 11, 36, 37],
        "slot_mapping_for([7, 2, 9], 0..9, block_size 4)",
    )


def test_decode_position_lands_in_the_last_block(learner):
    """A single decode position p uses block p // block_size of the table, at offset p %
    block_size."""
    check_equal(
        learner.slot_mapping_for([7, 2, 9], [9], 4), [37], "slot_mapping_for([7, 2, 9], [9], 4)"
    )
    check_equal(
        learner.slot_mapping_for([3, 0], [4], 4), [0], "slot_mapping_for([3, 0], [4], 4)"
    )
    check_equal(
        learner.slot_mapping_for([11, 40, 6], [14], 5),
        [34],
        "slot_mapping_for([11, 40, 6], [14], 5)",
    )


def test_positions_in_any_order(learner):
    """Positions need not start at 0 or be sorted: each gets its own slot, in the order
    given."""
    check_equal(
        learner.slot_mapping_for([5, 1, 6], [6, 7, 8, 9], 4),
        [6, 7, 24, 25],
        "a chunk at positions 6..9",
    )
    check_equal(
        learner.slot_mapping_for([5, 1, 6], [9, 0, 5], 4), [25, 20, 5], "positions [9, 0, 5]"
    )


@pytest.mark.parametrize("bad_at", ["first", "middle", "last"])
def test_position_beyond_the_table_raises_value_error_naming_it(learner, bad_at):
    """Position 12 with block_size 4 needs a fourth block: ValueError naming 12, wherever it is
    in the list."""
    positions = {"first": [12, 0, 1], "middle": [0, 12, 1], "last": [0, 1, 12]}[bad_at]
    error = check_raises(
        ValueError,
        learner.slot_mapping_for,
        [7, 2, 9],
        positions,
        4,
        what=f"slot_mapping_for([7, 2, 9], {positions}, 4)",
    )
    check_names(error, 12, f"slot_mapping_for([7, 2, 9], {positions}, 4)")


@pytest.mark.parametrize("positions", [[-1], [3, -7, 4]])
def test_negative_position_raises_value_error_naming_it(learner, positions):
    """A negative position is a bug in the caller, not a position counted from the end of the
    table."""
    error = check_raises(
        ValueError,
        learner.slot_mapping_for,
        [7, 2, 9],
        positions,
        4,
        what=f"slot_mapping_for([7, 2, 9], {positions}, 4)",
    )
    check_names(error, min(positions), f"slot_mapping_for([7, 2, 9], {positions}, 4)")


def test_random_tables_match_minillm(learner):
    """Any block size, any shuffled table, any run of positions, also out of order."""
    rng = random.Random(1)
    for case in range(150):
        block_size = rng.choice([1, 2, 3, 4, 5, 7, 8, 16, 33])
        table = rng.sample(range(1000), rng.randint(1, 8))
        start = rng.randrange(len(table) * block_size)
        positions = list(range(start, rng.randint(start + 1, len(table) * block_size)))
        if case % 3 == 0:
            rng.shuffle(positions)
        check_equal(
            learner.slot_mapping_for(table, positions, block_size),
            slot_mapping_for(table, positions, block_size),
            f"case {case}: slot_mapping_for({table}, {positions}, {block_size})",
        )
