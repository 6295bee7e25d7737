"""A batch's K rows gathered through CSR page tables (FlashInfer's paged_kv_indptr,
paged_kv_indices and paged_kv_last_page_len) by a Triton kernel, one program per request and
tile of TILE positions."""

import torch

from minillm.kernels import load_triton

triton = load_triton()  # without a GPU this selects Triton's interpreter first
import triton.language as tl  # noqa: E402

TILE = 16  # positions per program in gather_k


@triton.jit
def gather_k_kernel(
    k_cache_ptr,
    kv_indptr_ptr,
    kv_indices_ptr,
    last_page_len_ptr,
    out_start_ptr,
    out_ptr,
    stride_page,
    stride_offset,
    ROW: tl.constexpr,
    BLOCK_ROW: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    TILE: tl.constexpr,
):
    """Program (b, t) copies positions t * TILE .. t * TILE + TILE - 1 of request b (those below
    its length), each a row of ROW numbers (all heads), into out from row out_start[b] on."""
    pass  # your kernel


def gather_k(
    k_cache: torch.Tensor,
    kv_indptr: list[int],
    kv_indices: list[int],
    kv_last_page_len: list[int],
) -> torch.Tensor:
    """k_cache [num_pages, page_size, kv_heads, head_dim] -> out [total_tokens, kv_heads,
    head_dim], the requests' K one after another, by the kernel."""
    raise NotImplementedError("gather_k")
