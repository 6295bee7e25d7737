"""Tests for num_blocks_needed and slot_mapping: by hand, then random flat batches (prefills,
chunks, decodes, padding; any block size, shuffled int32 or int64 tables) against a per-token
loop over minillm.paged.slot_mapping_for, edge cases, and errors naming the value at fault."""

import random

import pytest
import torch
from grading import check_equal, check_names, check_raises

from minillm.paged import num_blocks_for, slot_mapping_for


def batch(requests, block_size, padding=0, width=None, dtype=torch.int32, seed=0):
    """A flat batch of requests (num_cached, num_new), each with its own shuffled blocks.

    Returns block_tables [B, width] (filler 0 past each table), query_start_loc [B + 1],
    positions [N] (padding positions are junk) and the expected slots, from a per-token loop.
    """
    rng = random.Random(seed)
    widths = [num_blocks_for(cached + new, block_size) for cached, new in requests]
    width = max(widths + [1]) if width is None else width
    free = rng.sample(range(10 * width * max(len(requests), 1)), sum(widths))
    tables, positions, starts, expected = [], [], [0], []
    for (cached, new), n_blocks in zip(requests, widths):
        table = [free.pop() for _ in range(n_blocks)]
        tables.append(table + [0] * (width - n_blocks))
        new_positions = list(range(cached, cached + new))
        positions += new_positions
        starts.append(starts[-1] + new)
        expected += slot_mapping_for(table, new_positions, block_size)  # the per-token loop
    positions += [rng.choice([0, -3, 10**6]) for _ in range(padding)]  # padding: any value
    expected += [-1] * padding
    return (
        torch.tensor(tables, dtype=dtype).reshape(len(requests), width),
        torch.tensor(starts, dtype=torch.int32),
        torch.tensor(positions, dtype=torch.long),
        torch.tensor(expected, dtype=torch.long),
    )


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


def test_example(learner):
    """The example of the problem: a chunk at 3..5, a decode at 2, two padding tokens."""
    got = learner.slot_mapping(
        torch.tensor([[7, 2, 9], [4, 0, 0]], dtype=torch.int32),
        torch.tensor([0, 3, 4], dtype=torch.int32),
        torch.tensor([3, 4, 5, 2, 0, 0]),
        4,
    )
    check_equal(got, torch.tensor([31, 8, 9, 18, -1, -1]), "slot_mapping of the example")


def test_one_token_decodes_each_use_their_own_table(learner):
    """A decode batch: token i is request i's only new token, at its own position (its cached
    length), through row i of the tables; block size 5."""
    tables, starts, positions, expected = batch(
        [(9, 1), (0, 1), (14, 1), (5, 1), (23, 1)], block_size=5, seed=1
    )
    check_equal(
        learner.slot_mapping(tables, starts, positions, 5),
        expected,
        f"slot_mapping({tables.tolist()}, {starts.tolist()}, {positions.tolist()}, 5)",
    )


def test_requests_ending_and_starting_at_a_block_boundary(learner):
    """A prefill that fills its 2 blocks exactly (no filler), a chunk that starts a new block,
    and a decode at the first slot of a block."""
    tables, starts, positions, expected = batch([(0, 8), (8, 4), (11, 1), (4, 1)], block_size=4)
    check_equal(
        learner.slot_mapping(tables, starts, positions, 4),
        expected,
        f"slot_mapping({tables.tolist()}, {starts.tolist()}, {positions.tolist()}, 4)",
    )


def test_padding_tokens_get_minus_one(learner):
    """Tokens after query_start_loc[-1] are padding: -1, whatever their positions say (0, -3 or
    10**6 here), never slot 0 of the pool and never an error."""
    tables, starts, positions, expected = batch([(0, 3), (6, 1)], block_size=4, padding=5)
    check_equal(
        learner.slot_mapping(tables, starts, positions, 4),
        expected,
        f"slot_mapping({tables.tolist()}, {starts.tolist()}, {positions.tolist()}, 4)",
    )


def test_a_batch_of_padding_only(learner):
    """No request at all (B = 0): every token is padding; and N = 0 gives an empty int64
    tensor."""
    empty_tables = torch.zeros(0, 3, dtype=torch.int32)
    no_requests = torch.tensor([0], dtype=torch.int32)
    check_equal(
        learner.slot_mapping(empty_tables, no_requests, torch.tensor([0, 7, 0]), 4),
        torch.tensor([-1, -1, -1]),
        "slot_mapping of 3 padding tokens and no request",
    )
    got = learner.slot_mapping(empty_tables, no_requests, torch.zeros(0, dtype=torch.long), 4)
    check_equal(got, torch.zeros(0, dtype=torch.long), "slot_mapping of an empty batch")
    check_equal(str(got.dtype), "torch.int64", "the dtype of the empty slot mapping")


def test_large_block_ids_stay_exact_in_int64(learner):
    """Block 2**30 of 16 tokens starts at slot 2**34: an int32 table must not make the product
    wrap around, and the result is int64."""
    tables = torch.tensor([[5, 2**30], [2**31 - 1, 0]], dtype=torch.int32)
    starts = torch.tensor([0, 2, 3], dtype=torch.int32)
    got = learner.slot_mapping(tables, starts, torch.tensor([16, 17, 3]), 16)
    check_equal(str(got.dtype), "torch.int64", "the dtype of the slot mapping")
    check_equal(
        got,
        torch.tensor([2**34, 2**34 + 1, (2**31 - 1) * 16 + 3]),
        "slot_mapping with block ids 2**30 and 2**31 - 1, block_size 16",
    )


def test_random_tables_match_minillm(learner):
    """Random mixes of prefills, chunks and decodes, any block size, shuffled int32 or int64
    tables wider than needed, with and without padding, against a per-token loop."""
    rng = random.Random(2)
    for case in range(60):
        block_size = rng.choice([1, 2, 3, 4, 5, 7, 16, 33])
        requests = []
        for _ in range(rng.randint(1, 7)):
            cached = rng.choice([0, rng.randrange(4 * block_size)])
            new = rng.choice([1, 1, rng.randint(1, 3 * block_size)])
            requests.append((cached, new))
        need = max(num_blocks_for(c + n, block_size) for c, n in requests)
        tables, starts, positions, expected = batch(
            requests,
            block_size,
            padding=rng.choice([0, 0, rng.randint(1, 6)]),
            width=need + rng.randint(0, 2),
            dtype=rng.choice([torch.int32, torch.long]),
            seed=case,
        )
        check_equal(
            learner.slot_mapping(tables, starts, positions, block_size),
            expected,
            f"case {case}: slot_mapping({tables.tolist()}, {starts.tolist()}, "
            f"{positions.tolist()}, {block_size})",
        )


@pytest.mark.parametrize("bad_request", [0, 1, 2])
def test_position_beyond_the_table_raises_value_error_naming_it(learner, bad_request):
    """Position 12 with block_size 4 needs block 3 of 3-column tables: ValueError naming 12,
    whichever request it belongs to."""
    tables = torch.tensor([[7, 2, 9], [4, 1, 0], [3, 5, 6]], dtype=torch.int32)
    rows = [[0, 1], [5], [10, 11]]
    rows[bad_request] = rows[bad_request][:-1] + [12]
    positions = torch.tensor([p for row in rows for p in row])
    starts = torch.tensor([0, 2, 3, 5], dtype=torch.int32)
    what = f"slot_mapping({tables.tolist()}, {starts.tolist()}, {positions.tolist()}, 4)"
    error = check_raises(
        ValueError, learner.slot_mapping, tables, starts, positions, 4, what=what
    )
    check_names(error, 12, what)


def test_negative_position_raises_value_error_naming_it(learner):
    """A negative position of a real token is a bug in the caller, not a position counted from
    the end of the table."""
    tables = torch.tensor([[7, 2, 9], [4, 1, 0]], dtype=torch.int32)
    starts = torch.tensor([0, 2, 3], dtype=torch.int32)
    positions = torch.tensor([0, 1, -7])
    what = f"slot_mapping({tables.tolist()}, {starts.tolist()}, {positions.tolist()}, 4)"
    error = check_raises(
        ValueError, learner.slot_mapping, tables, starts, positions, 4, what=what
    )
    check_names(error, -7, what)


def test_more_tokens_claimed_than_given_raises_value_error_naming_it(learner):
    """query_start_loc says 5 tokens, positions holds 4: ValueError naming 5."""
    tables = torch.tensor([[7, 2], [4, 1]], dtype=torch.int32)
    starts = torch.tensor([0, 2, 5], dtype=torch.int32)
    positions = torch.tensor([0, 1, 4, 5])
    what = f"slot_mapping({tables.tolist()}, {starts.tolist()}, {positions.tolist()}, 4)"
    error = check_raises(
        ValueError, learner.slot_mapping, tables, starts, positions, 4, what=what
    )
    check_names(error, 5, what)
