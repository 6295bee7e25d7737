"""Tests for gather_k: the example, random caches and shuffled tables of any shape against
torch indexing (bit for bit), tiles that cross block boundaries, the partial last block and
the partial last tile, an empty request, other dtypes, and the errors on bad tables."""

import random

import torch
from grading import check_equal, check_names, check_raises, check_shape, launch


def cache(seed, num_blocks, block_size, kv_heads, head_dim, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(num_blocks, block_size, kv_heads, head_dim, generator=g).to(dtype)


def expected(k_cache, table, seq_len):
    return k_cache[torch.tensor(table, dtype=torch.long)].flatten(0, 1)[:seq_len]


def test_the_example(learner):
    """Blocks of 3, 2 KV heads of 80: two tiles of 16 positions, the first ending in the middle
    of block 6, whose other two positions open the second tile."""
    k_cache = cache(0, 8, 3, 2, 80)
    table = [5, 0, 7, 3, 1, 6, 2]
    check_equal(
        learner.gather_k(k_cache, table, 20),
        expected(k_cache, table, 20),
        f"gather_k(k_cache [8, 3, 2, 80], {table}, 20)",
    )


def test_random_tables_and_shapes_match_torch_indexing(learner):
    """Any block size, any number of KV heads, head dims whose rows are not a power of two
    (80, 12), contexts of several tiles."""
    rng = random.Random(7)
    for case in range(10):
        block_size, kv_heads, head_dim = (
            rng.choice([1, 2, 3, 5, 8, 16, 24]),
            rng.randint(1, 4),
            rng.choice([4, 12, 16, 80]),
        )
        seq_len = rng.randint(1, 70)
        need = -(-seq_len // block_size)
        num_blocks = need + rng.randint(0, 5)
        table = rng.sample(range(num_blocks), need)
        k_cache = cache(case, num_blocks, block_size, kv_heads, head_dim)
        check_equal(
            learner.gather_k(k_cache, table, seq_len),
            expected(k_cache, table, seq_len),
            f"gather_k(k_cache [{num_blocks}, {block_size}, {kv_heads}, {head_dim}], {table}, "
            f"{seq_len})",
        )


def test_tiles_that_cross_block_boundaries(learner):
    """Block sizes that do not divide the tile of 16 (3, 5, 6) and one larger than it that is
    not a multiple (24): tiles start and end in the middle of blocks, and the rows of one tile
    come from several blocks, in the table's order, not the pool's."""
    for block_size in (3, 5, 6, 24):
        seq_len = 61  # four tiles, the last one partial
        need = -(-seq_len // block_size)
        table = random.Random(block_size).sample(range(need + 3), need)
        k_cache = cache(30 + block_size, need + 3, block_size, 2, 8)
        check_equal(
            learner.gather_k(k_cache, table, seq_len),
            expected(k_cache, table, seq_len),
            f"gather_k(k_cache [{need + 3}, {block_size}, 2, 8], {table}, {seq_len})",
        )


def test_only_the_filled_part_of_the_last_block_is_read(learner):
    k_cache = cache(1, 4, 8, 1, 4)
    for seq_len in (1, 7, 8, 9, 17):
        table = [3, 1, 0][: -(-seq_len // 8)]
        check_equal(
            learner.gather_k(k_cache, table, seq_len),
            expected(k_cache, table, seq_len),
            f"gather_k(k_cache [4, 8, 1, 4], {table}, {seq_len})",
        )


def test_extra_blocks_in_the_table_are_ignored(learner):
    k_cache = cache(2, 5, 4, 2, 4)
    check_equal(
        learner.gather_k(k_cache, [2, 4, 1, 0], 6),
        expected(k_cache, [2, 4], 6),
        "gather_k(k_cache [5, 4, 2, 4], [2, 4, 1, 0], 6): only 2 blocks are needed",
    )


def test_an_empty_request_gives_an_empty_tensor(learner):
    """seq_len 0: a tensor [0, kv_heads, head_dim] in the cache's dtype, as for any length."""
    for kv_heads, head_dim, dtype in (
        (2, 8, torch.float32),
        (3, 12, torch.float16),
        (1, 4, torch.float64),
    ):
        k_cache = cache(3, 2, 4, kv_heads, head_dim, dtype)
        for table in ([], [1]):
            got = learner.gather_k(k_cache, table, 0)
            what = f"gather_k(k_cache [2, 4, {kv_heads}, {head_dim}] {dtype}, {table}, 0)"
            check_shape(got, (0, kv_heads, head_dim), what)
            check_equal(str(got.dtype), str(dtype), f"the dtype of {what}")


MARK = -7777.0  # no cache holds it: a marker after out, where the kernel must not write
POISON = -5555.0  # the rows of a block no position of the request maps to


def test_the_kernel_touches_nothing_outside_the_rows(learner):
    """gather_k_kernel launched directly, grid (cdiv(seq_len, TILE),), with tiles of 8, 16 or
    32 positions and rows of ROW = kv_heads * head_dim numbers padded to BLOCK_ROW, the next
    power of two. After the request's table come entries naming a poison block, and out is
    followed by marker values: every row must be right and every marker untouched. The last
    tile runs past seq_len; a position past it has no block of the request and no row of out,
    so neither its row nor any column past ROW may be written.
    """
    rng = random.Random(12)
    for case in range(8):
        block_size, kv_heads = rng.choice([1, 3, 4, 5, 8]), rng.randint(1, 3)
        head_dim = rng.choice([4, 6, 12, 20, 80])
        tile = rng.choice([8, 16, 32])
        row = kv_heads * head_dim
        seq_len = rng.randint(1, 50)
        need = -(-seq_len // block_size)
        num_blocks = need + rng.randint(0, 2)
        table = rng.sample(range(num_blocks - 1), need - 1) + [num_blocks - 1]  # read the last
        k_cache = cache(20 + case, num_blocks, block_size, kv_heads, head_dim)
        poisoned = torch.cat([k_cache, torch.full((1, *k_cache.shape[1:]), POISON)])
        width = 1 << (row - 1).bit_length()  # the next power of two
        grid = -(-seq_len // tile)
        args = launch(
            learner.gather_k_kernel,
            (grid,),
            torch.cat([poisoned.flatten(), torch.full((2 * width,), MARK)]),
            torch.tensor(table + [num_blocks] * (2 * tile), dtype=torch.long),
            torch.full((seq_len * row + 2 * width + tile * row,), MARK),
            seq_len,
            k_cache.stride(0),
            k_cache.stride(1),
            ROW=row,
            BLOCK_ROW=width,
            BLOCK_SIZE=block_size,
            TILE=tile,
        )
        out = args[2]
        what = (
            f"case {case}: gather_k_kernel[({grid},)] with TILE {tile} on a cache "
            f"[{num_blocks}, {block_size}, {kv_heads}, {head_dim}] (ROW {row}, BLOCK_ROW "
            f"{width}), the table {table} and seq_len {seq_len}"
        )
        check_equal(
            out[: seq_len * row].view(seq_len, kv_heads, head_dim),
            expected(k_cache, table, seq_len),
            f"{what}: out",
        )
        wrote = [i for i, x in enumerate(out[seq_len * row :].tolist()) if x != MARK]
        check_equal(
            wrote,
            [],
            f"{what}: the elements after the end of out that your kernel wrote",
        )


def test_the_caches_dtype_is_kept(learner):
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        k_cache = cache(4, 3, 2, 2, 4, dtype)
        got = learner.gather_k(k_cache, [2, 0], 3)
        check_equal(str(got.dtype), str(dtype), f"the dtype of gather_k on a {dtype} cache")
        check_equal(got, expected(k_cache, [2, 0], 3), f"gather_k on a {dtype} cache")


def test_bad_arguments_are_refused_by_name(learner):
    """The message names the value at fault: the seq_len the table is too short for, the block
    that is not in the cache (not only the cache's size), a negative seq_len. The numbers cannot
    be in it by accident."""
    k_cache = cache(5, 9, 4, 2, 8)
    error = check_raises(
        ValueError, learner.gather_k, k_cache, [5, 0], 11, what="gather_k(k_cache, [5, 0], 11)"
    )
    check_names(error, 11, "the error for a table too short for 11 tokens")
    for table in ([5, 13, 0], [-3, 1, 2]):
        bad = next(b for b in table if not 0 <= b < 9)
        what = f"gather_k(k_cache [9, 4, 2, 8], {table}, 10)"
        error = check_raises(ValueError, learner.gather_k, k_cache, table, 10, what=what)
        check_names(error, bad, f"{what}, for block {bad} of a 9-block cache")
    error = check_raises(
        ValueError, learner.gather_k, k_cache, [1], -1, what="gather_k(k_cache, [1], -1)"
    )
    check_names(error, -1, "the error for seq_len -1")
