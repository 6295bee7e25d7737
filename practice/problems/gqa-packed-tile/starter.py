"""Causal paged attention for one request's new tokens, a KV head's query heads packed into
each tile's rows, as a Triton kernel."""

import torch

from minillm.kernels import load_triton

triton = load_triton()  # without a GPU this selects Triton's interpreter first
import triton.language as tl  # noqa: E402

BLOCK_M = 16  # packed rows per program: (token, query head) pairs
BLOCK_N = 16  # keys per step of a program's loop


@triton.jit
def packed_attention_kernel(
    out_ptr,
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,  # out, q [T, H, hd]; caches [num_blocks, BLOCK_SIZE, KV, hd]
    block_table_ptr,  # [blocks] int64
    seq_len,
    num_tokens,
    scale,
    stride_t,
    stride_h,  # a token's and a head's stride in q and out
    stride_kb,
    stride_ks,
    stride_kh,  # block, offset, head strides of both caches
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Program (tile, kv_head): packed rows tile * BLOCK_M ... + BLOCK_M - 1, row r being
    token r // GROUP and query head kv_head * GROUP + r % GROUP."""
    pass  # your kernel


def packed_attention(q, k_cache, v_cache, block_table, seq_len, scale):
    """q [T, H, hd] for the last T tokens of a seq_len-token context; caches [num_blocks,
    block_size, KV, hd] float32; block_table a list of block ids -> out [T, H, hd]."""
    raise NotImplementedError("packed_attention")
