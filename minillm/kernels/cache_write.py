"""cache_write.py — the step's new K/V written into the paged cache through the slot mapping, as
a kernel.

vLLM calls this `reshape_and_cache` (`reshape_and_cache_flash` for the [num_blocks, block_size,
KV, hd] layout used here): one program per new token copies its K and V rows, every KV head at
once, to slot `slot_mapping[t]`, which is block * block_size + offset, so in this layout the
slot is simply the row of the cache seen as [num_blocks * block_size, KV, hd]. A negative slot
means "write nothing" (vLLM pads with -1); the torch path (`PagedKVCache.store`) has no such
slots, since every row is a token.
"""

from __future__ import annotations

import torch

from minillm.kernels.triton_runtime import load_triton

triton = load_triton()
import triton.language as tl  # noqa: E402


@triton.jit
def reshape_and_cache_kernel(
    # k, v [N, KV, hd]; caches [slots, KV, hd]; slot_mapping [N]
    k_ptr,
    v_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_mapping_ptr,
    # a token's and a head's stride in k and in v
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    # a slot's and a head's stride in the caches (both caches share a layout)
    stride_cs,
    stride_ch,
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    t = tl.program_id(0)  # which new token
    slot = tl.load(slot_mapping_ptr + t)
    if slot < 0:  # a padding row: nothing to store
        return
    heads = tl.arange(0, BLOCK_H)
    dims = tl.arange(0, BLOCK_D)
    mask = (heads[:, None] < NUM_KV_HEADS) & (dims[None, :] < HEAD_DIM)
    k_rows = k_ptr + t * stride_kt + heads[:, None] * stride_kh  # [BLOCK_H, 1]
    v_rows = v_ptr + t * stride_vt + heads[:, None] * stride_vh
    k = tl.load(k_rows + dims[None, :], mask=mask)  # [BLOCK_H, BLOCK_D]
    v = tl.load(v_rows + dims[None, :], mask=mask)
    at = slot * stride_cs + heads[:, None] * stride_ch + dims[None, :]
    tl.store(k_cache_ptr + at, k, mask=mask)
    tl.store(v_cache_ptr + at, v, mask=mask)


def triton_cache_write(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """k, v [N, KV, hd] into caches [num_blocks, block_size, KV, hd] (contiguous) at
    slot_mapping [N] (int64)."""
    N, KV, hd = k.shape
    if N == 0:
        return
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError(
            "triton_cache_write needs contiguous caches: a slot is a row of [num_blocks * "
            "block_size, KV, hd]"
        )
    # the kernel steps along head_dim one element at a time
    k, v = k.contiguous(), v.contiguous()
    stride_cs, stride_ch = KV * hd, hd  # the cache as [num_blocks * block_size, KV, hd]
    reshape_and_cache_kernel[(N,)](
        k,
        v,
        k_cache,
        v_cache,
        slot_mapping,
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        stride_cs,
        stride_ch,
        NUM_KV_HEADS=KV,
        HEAD_DIM=hd,
        BLOCK_H=triton.next_power_of_2(KV),
        BLOCK_D=triton.next_power_of_2(hd),
    )
