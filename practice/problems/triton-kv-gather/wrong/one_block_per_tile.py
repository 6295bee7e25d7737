"""Wrong: looks up one block per tile, the block of the tile's first position, and reads the
tile's TILE rows from it: right only while a tile stays inside one block.

Caught by: test_tiles_that_cross_block_boundaries.
"""

import torch

from minillm.kernels import load_triton

triton = load_triton()  # without a GPU this selects Triton's interpreter first
import triton.language as tl  # noqa: E402

TILE = 16  # positions per program in gather_k


@triton.jit
def gather_k_kernel(
    k_cache_ptr,
    block_table_ptr,
    out_ptr,
    seq_len,
    stride_block,
    stride_offset,
    ROW: tl.constexpr,
    BLOCK_ROW: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE: tl.constexpr,
):
    """Program t copies positions t * TILE .. t * TILE + TILE - 1 (those below seq_len), each a
    row of ROW numbers (all heads), into out."""
    t = tl.program_id(0)
    pos = t * TILE + tl.arange(0, TILE)  # [TILE] positions
    pos_ok = pos < seq_len  # the last tile may run past the request
    cols = tl.arange(0, BLOCK_ROW)  # [BLOCK_ROW] a power of two >= ROW
    ok = pos_ok[:, None] & (cols[None, :] < ROW)  # [TILE, BLOCK_ROW]
    # each position looks up its own block: a tile may span several blocks, or part of one
    block = tl.load(block_table_ptr + (t * TILE) // BLOCK_SIZE)  # the tile's first
    offsets = (t * TILE) % BLOCK_SIZE + tl.arange(0, TILE)  # [TILE]
    src = block * stride_block + offsets * stride_offset  # [TILE]
    rows = tl.load(k_cache_ptr + src[:, None] + cols[None, :], mask=ok)  # [TILE, BLOCK_ROW]
    tl.store(out_ptr + pos[:, None] * ROW + cols[None, :], rows, mask=ok)


def gather_k(k_cache: torch.Tensor, block_table: list[int], seq_len: int) -> torch.Tensor:
    """k_cache [num_blocks, block_size, kv_heads, head_dim] -> out [seq_len, kv_heads,
    head_dim], by the kernel, TILE positions per program."""
    num_blocks, block_size, kv_heads, head_dim = k_cache.shape
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 0:
        raise ValueError(f"seq_len is {seq_len!r}: expected an int >= 0")
    need = -(-seq_len // block_size)
    if len(block_table) < need:
        raise ValueError(
            f"{seq_len} tokens need {need} blocks of {block_size}, but the block table has "
            f"{len(block_table)}"
        )
    bad = [b for b in block_table[:need] if not 0 <= b < num_blocks]
    if bad:
        raise ValueError(
            f"the block table lists block {bad[0]}: expected 0 <= block < {num_blocks}"
        )
    out = torch.empty(seq_len, kv_heads, head_dim, dtype=k_cache.dtype)
    if seq_len == 0:
        return out
    table = torch.tensor(block_table[:need], dtype=torch.long)
    row = kv_heads * head_dim
    gather_k_kernel[(triton.cdiv(seq_len, TILE),)](
        k_cache,
        table,
        out,
        seq_len,
        k_cache.stride(0),
        k_cache.stride(1),
        ROW=row,
        BLOCK_ROW=triton.next_power_of_2(row),
        BLOCK_SIZE=block_size,
        TILE=TILE,
    )
    return out
