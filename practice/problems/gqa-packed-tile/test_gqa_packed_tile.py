"""Tests for packed_attention: against a dense causal GQA reference on random shapes (prefills,
chunks after cached tokens, decodes, shuffled tables), the kernel launched on the packed grid
(one program per tile and KV head), a tile that must not read past its last row's position,
and the errors on bad arguments."""

import math
import random

import torch
from grading import check_close, check_names, check_raises, launch


def tensors(seed, num_blocks, block_size, kv_heads, group, head_dim, num_tokens):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(num_blocks, block_size, kv_heads, head_dim, generator=g)
    v = torch.randn(num_blocks, block_size, kv_heads, head_dim, generator=g)
    q = torch.randn(num_tokens, kv_heads * group, head_dim, generator=g)
    return q, k, v


def reference(q, k_cache, v_cache, table, seq_len, scale):
    """softmax over the keys each new token may see (up to its own position), in float64."""
    T, H, _ = q.shape
    group = H // k_cache.shape[2]
    idx = torch.tensor(table, dtype=torch.long)
    k = k_cache[idx].flatten(0, 1)[:seq_len].repeat_interleave(group, dim=1).double()
    v = v_cache[idx].flatten(0, 1)[:seq_len].repeat_interleave(group, dim=1).double()
    s = torch.einsum("thd,khd->htk", q.double(), k) * scale  # [H, T, seq_len]
    pos = torch.arange(seq_len - T, seq_len)
    s = s.masked_fill(torch.arange(seq_len)[None, :] > pos[:, None], float("-inf"))
    return torch.einsum("htk,khd->thd", s.softmax(-1), v).float()


def test_the_example(learner):
    q, k, v = tensors(0, 6, 4, 2, 4, 16, 5)
    for seq_len, what in ((18, "5 new tokens after 13 cached"), (5, "a prefill of 5")):
        table = [5, 0, 3, 1, 2]
        check_close(
            learner.packed_attention(q, k, v, table, seq_len, 0.25),
            reference(q, k, v, table, seq_len, 0.25),
            f"packed_attention: {what}, 8 query heads on 2 KV heads, blocks of 4",
        )


def test_random_shapes_match_dense_causal_attention(learner):
    """Decodes, prefills and chunks; groups of 1 to 8 query heads per KV head; block sizes that
    do not divide anything; head dims that are not powers of two."""
    rng = random.Random(5)
    for case in range(7):
        block_size, kv_heads = rng.choice([1, 3, 4, 16]), rng.randint(1, 2)
        group, head_dim = rng.choice([1, 2, 3, 4, 8]), rng.choice([8, 12, 16])
        seq_len = rng.randint(2, 40)
        num_tokens = [1, seq_len, rng.randint(2, seq_len)][case % 3]
        need = -(-seq_len // block_size)
        table = rng.sample(range(need + 2), need)
        q, k, v = tensors(
            10 + case, need + 2, block_size, kv_heads, group, head_dim, num_tokens
        )
        check_close(
            learner.packed_attention(q, k, v, table, seq_len, head_dim**-0.5),
            reference(q, k, v, table, seq_len, head_dim**-0.5),
            f"case {case}: {num_tokens} new tokens ending a {seq_len}-token context, "
            f"{kv_heads * group} query heads on {kv_heads} KV heads, head_dim {head_dim}, "
            f"blocks of {block_size}, table {table}",
        )


def packed_launch(learner, q, k, v, table, seq_len, tiles, scale=0.5):
    """The kernel launched on `tiles` tiles of 16 packed rows and one program per KV head."""
    T, H, hd = q.shape
    group = H // k.shape[2]
    args = launch(
        learner.packed_attention_kernel,
        (tiles, k.shape[2]),
        torch.zeros_like(q),
        q,
        k,
        v,
        torch.tensor(table, dtype=torch.long),
        seq_len,
        T,
        scale,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        k.stride(2),
        GROUP=group,
        HEAD_DIM=hd,
        BLOCK_D=max(16, 1 << (hd - 1).bit_length()),
        BLOCK_SIZE=k.shape[1],
        BLOCK_M=16,
        BLOCK_N=16,
    )
    return args[0]


def test_one_program_serves_all_the_query_heads_of_its_kv_head(learner):
    """Launched on the packed grid (tiles of 16 rows, KV heads), the kernel fills every query
    head: a program per query head would leave most heads unwritten on this grid."""
    for num_tokens, group, kv_heads in ((1, 4, 2), (3, 8, 1), (5, 2, 3)):
        seq_len = 20
        q, k, v = tensors(num_tokens, 6, 4, kv_heads, group, 8, num_tokens)
        table = [4, 2, 5, 0, 1]
        check_close(
            packed_launch(learner, q, k, v, table, seq_len, math.ceil(num_tokens * group / 16)),
            reference(q, k, v, table, seq_len, 0.5),
            f"packed_attention_kernel on the grid ({math.ceil(num_tokens * group / 16)}, "
            f"{kv_heads}): {num_tokens} new token(s), {group} query heads per KV head",
        )


def test_a_tile_reads_no_key_past_its_last_rows_position(learner):
    """Only the first tile is launched; every key after its last row's position holds NaN.
    Its rows must come out right: a loop over the whole context would read the NaNs."""
    num_tokens, group, seq_len = 10, 4, 30  # 40 packed rows; tile 0 holds tokens 0-3
    q, k, v = tensors(3, 8, 4, 2, group, 8, num_tokens)
    table = [7, 1, 6, 0, 3, 5, 2, 4]
    expected = reference(q, k, v, table, seq_len, 0.5)
    kv_end = seq_len - num_tokens + 4  # token 3 sits at position 23 and sees keys 0-23
    for p in range(kv_end, seq_len):
        k[table[p // 4], p % 4] = float("nan")
        v[table[p // 4], p % 4] = float("nan")
    out = packed_launch(learner, q, k, v, table, seq_len, tiles=1)
    check_close(
        out[:4],
        expected[:4],
        "tile 0 of a 10-token chunk after 20 cached tokens, 4 query heads per KV head (keys "
        f"{kv_end}-{seq_len - 1} hold NaN: tile 0 must stop its loop at key {kv_end - 1})",
    )


def test_bad_arguments_are_refused_by_name(learner):
    q, k, v = tensors(4, 5, 4, 2, 2, 8, 3)
    error = check_raises(
        ValueError,
        learner.packed_attention,
        q,
        k,
        v,
        [1, 0],
        11,
        0.5,
        what="packed_attention(..., [1, 0], 11, ...)",
    )
    check_names(error, 11, "the error for a table too short for 11 tokens")
    error = check_raises(
        ValueError,
        learner.packed_attention,
        q,
        k,
        v,
        [1, 9],
        6,
        0.5,
        what="packed_attention(..., [1, 9], 6, ...) on a 5-block cache",
    )
    check_names(error, 9, "the error for block 9 of a 5-block cache")
    error = check_raises(
        ValueError,
        learner.packed_attention,
        q,
        k,
        v,
        [1],
        2,
        0.5,
        what="packed_attention(3 new tokens, ..., seq_len 2, ...)",
    )
    check_names(error, 2, "the error for seq_len 2 shorter than the 3 new tokens")
    error = check_raises(
        ValueError,
        learner.packed_attention,
        torch.randn(3, 5, 8),
        k,
        v,
        [1],
        3,
        0.5,
        what="packed_attention(q with 5 heads, caches with 2 KV heads, ...)",
    )
    check_names(error, 5, "the error for 5 query heads on 2 KV heads")
