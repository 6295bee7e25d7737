"""Tests for num_blocks_needed and slot_mapping_for, by hand and against minillm.paged."""

import random

from grading import check_equal, check_raises
from minillm.paged import slot_mapping_for


def test_blocks_needed_rounds_up(learner):
    """A partly filled last block still counts: ceil(num_tokens / block_size)."""
    got = [learner.num_blocks_needed(n, 4) for n in (0, 1, 4, 5, 10, 12)]
    check_equal(got, [0, 1, 1, 2, 3, 3], "num_blocks_needed(n, 4) for n = 0, 1, 4, 5, 10, 12")


def test_slots_follow_the_block_table(learner):
    """slot = block_table[p // block_size] * block_size + p % block_size."""
    got = learner.slot_mapping_for([7, 2, 9], list(range(10)), 4)
    check_equal(got, [28, 29, 30, 31, 8, 9, 10, 11, 36, 37], "slot_mapping_for([7, 2, 9], 0..9, block_size 4)")


def test_decode_position_lands_in_the_last_block(learner):
    """A single decode position p uses block p // block_size of the table, at offset p % block_size."""
    check_equal(learner.slot_mapping_for([7, 2, 9], [9], 4), [37], "slot_mapping_for([7, 2, 9], [9], 4)")
    check_equal(learner.slot_mapping_for([3, 0], [4], 4), [0], "slot_mapping_for([3, 0], [4], 4)")


def test_chunk_in_the_middle_of_a_prompt(learner):
    """Positions need not start at 0: a second prefill chunk covers positions 6..9."""
    got = learner.slot_mapping_for([5, 1, 6], [6, 7, 8, 9], 4)
    check_equal(got, [6, 7, 24, 25], "slot_mapping_for([5, 1, 6], [6, 7, 8, 9], 4)")


def test_position_beyond_the_table_raises_value_error(learner):
    """Position 12 with block_size 4 needs a fourth block: raise ValueError, do not wrap around or crash."""
    error = check_raises(ValueError, learner.slot_mapping_for, [7, 2, 9], [11, 12], 4,
                         what="slot_mapping_for([7, 2, 9], [11, 12], 4)")
    check_equal("12" in str(error), True, f"whether the error message names position 12 ({error})")
    check_raises(ValueError, learner.slot_mapping_for, [7, 2, 9], [-1], 4, what="slot_mapping_for(..., [-1], 4)")


def test_random_tables_match_minillm(learner):
    """Any block size, any shuffled table, any run of positions."""
    rng = random.Random(0)
    for case in range(200):
        block_size = rng.choice([1, 2, 3, 4, 8, 16])
        table = rng.sample(range(64), rng.randint(1, 8))
        start = rng.randrange(len(table) * block_size)
        positions = list(range(start, rng.randint(start + 1, len(table) * block_size)))
        check_equal(learner.slot_mapping_for(table, positions, block_size),
                    slot_mapping_for(table, positions, block_size),
                    f"case {case}: slot_mapping_for({table}, {positions[0]}..{positions[-1]}, {block_size})")
