"""A request's K rows gathered through its block table by a Triton kernel, one program per tile
of TILE positions."""

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
    pass  # your kernel


def gather_k(k_cache: torch.Tensor, block_table: list[int], seq_len: int) -> torch.Tensor:
    """k_cache [num_blocks, block_size, kv_heads, head_dim] -> out [seq_len, kv_heads,
    head_dim], by the kernel, TILE positions per program."""
    raise NotImplementedError("gather_k")
