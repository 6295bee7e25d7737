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
    pass  # your kernel: tl.program_id(0), tl.load the block id, tl.load the row, tl.store it


def gather_k(k_cache: torch.Tensor, block_table: list[int], seq_len: int) -> torch.Tensor:
    """k_cache [num_blocks, block_size, kv_heads, head_dim] -> out [seq_len, kv_heads,
    head_dim], by the kernel."""
    raise NotImplementedError("gather_k")
