"""A request's K rows gathered through its block table by a Triton kernel, one program per
position."""

import torch

from minillm.kernels import load_triton

triton = load_triton()  # without a GPU this selects Triton's interpreter first
import triton.language as tl  # noqa: E402


@triton.jit
def gather_k_kernel(
    k_cache_ptr,
    block_table_ptr,
    out_ptr,
    stride_block,
    stride_offset,
    ROW: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    """Program p copies the ROW numbers of position p's K (all heads) into out[p]."""
    p = tl.program_id(0)
    block = tl.load(block_table_ptr + p // BLOCK_SIZE)  # which block holds position p
    cols = tl.arange(0, BLOCK)  # a power of two: the mask cuts it to ROW
    mask = cols < ROW
    row = tl.load(
        k_cache_ptr + block * stride_block + (p % BLOCK_SIZE) * stride_offset + cols, mask=mask
    )
    tl.store(out_ptr + p * ROW + cols, row, mask=mask)


def gather_k(k_cache: torch.Tensor, block_table: list[int], seq_len: int) -> torch.Tensor:
    """k_cache [num_blocks, block_size, kv_heads, head_dim] -> out [seq_len, kv_heads,
    head_dim], by the kernel."""
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
    gather_k_kernel[(seq_len,)](
        k_cache,
        table,
        out,
        k_cache.stride(0),
        k_cache.stride(1),
        ROW=row,
        BLOCK=triton.next_power_of_2(row),
        BLOCK_SIZE=block_size,
    )
    return out
