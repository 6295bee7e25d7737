"""Wrong: one program per query head, as the chapter's mixed-batch kernel: each loads its
K/V itself, so a KV head's keys are read GROUP times, and on the packed grid
most heads stay unwritten.

Caught by: test_one_program_serves_all_the_query_heads_of_its_kv_head.
"""

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
    tile = tl.program_id(0)
    one_head = tl.program_id(1)
    kv_head = one_head // GROUP
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    token = rows  # rows are tokens; the head is the program's
    head = one_head + 0 * rows
    row_ok = token < num_tokens
    pos = seq_len - num_tokens + token  # the new tokens end the context
    dims = tl.arange(0, BLOCK_D)
    dim_ok = dims < HEAD_DIM
    q = tl.load(
        q_ptr + token[:, None] * stride_t + head[:, None] * stride_h + dims[None, :],
        mask=row_ok[:, None] & dim_ok[None, :],
        other=0.0,
    )  # [BLOCK_M, BLOCK_D]
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    last_token = tl.minimum((tile + 1) * BLOCK_M, num_tokens) - 1
    kv_end = seq_len - num_tokens + last_token + 1  # no row of the tile sees further
    for start in range(0, kv_end, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        key_ok = keys < kv_end
        block = tl.load(block_table_ptr + keys // BLOCK_SIZE, mask=key_ok, other=0)
        at = block[:, None] * stride_kb + (keys % BLOCK_SIZE)[:, None] * stride_ks
        at += kv_head * stride_kh + dims[None, :]
        kv_mask = key_ok[:, None] & dim_ok[None, :]
        k = tl.load(k_cache_ptr + at, mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
        v = tl.load(v_cache_ptr + at, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale  # [BLOCK_M, BLOCK_N]
        s = tl.where(key_ok[None, :] & (keys[None, :] <= pos[:, None]), s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))  # finite: every row sees key 0
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m = m_new
    tl.store(
        out_ptr + token[:, None] * stride_t + head[:, None] * stride_h + dims[None, :],
        acc / l[:, None],
        mask=row_ok[:, None] & dim_ok[None, :],
    )


def packed_attention(q, k_cache, v_cache, block_table, seq_len, scale):
    """q [T, H, hd] for the last T tokens of a seq_len-token context; caches [num_blocks,
    block_size, KV, hd] float32; block_table a list of block ids -> out [T, H, hd]."""
    T, H, hd = q.shape
    num_blocks, block_size, KV, _ = k_cache.shape
    if H % KV:
        raise ValueError(f"{H} query heads do not divide among {KV} KV heads")
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < T:
        raise ValueError(f"seq_len is {seq_len!r}: expected an int >= the {T} new tokens")
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
    q = q.contiguous()
    out = torch.empty_like(q)
    if T == 0:
        return out
    group = H // KV
    packed_attention_kernel[(triton.cdiv(T, BLOCK_M), H)](
        out,
        q,
        k_cache,
        v_cache,
        torch.tensor(block_table[:need], dtype=torch.long),
        seq_len,
        T,
        scale,
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        GROUP=group,
        HEAD_DIM=hd,
        BLOCK_D=max(16, triton.next_power_of_2(hd)),
        BLOCK_SIZE=block_size,
        BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N,
    )
    return out
