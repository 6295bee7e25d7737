"""triton_attention.py — paged attention over the flat mixed batch, as one Triton kernel.

One program computes one tile of BLOCK_Q query rows of one request, for one query head: it finds
the request's rows through query_start_loc, walks the request's keys BLOCK_N at a time, fetches
each key's K and V row through the block table (position p lives in block block_table[p //
BLOCK_SIZE], at offset p % BLOCK_SIZE), masks what the new tokens may not see (they are the
context's last tokens, so the causal mask is aligned to the end), and keeps FlashAttention's
running max, running sum and unnormalised output, so the whole score row never exists at once.
GQA: query head h reads KV head h // (H // KV). Every prefill, chunk and decode of the step runs
in the same launch.
"""

from __future__ import annotations

import torch

from minillm.kernels.triton_runtime import load_triton

triton = load_triton()
import triton.language as tl  # noqa: E402  (after load_triton: it chooses compiled or interpreted)

BLOCK_Q = 16  # query rows per program: tl.dot needs at least 16 on a GPU
BLOCK_N = 32  # keys per step of a program's loop


@triton.jit
def paged_attention_kernel(
    # out, q [N, H, hd]; caches [num_blocks, BLOCK_SIZE, KV, hd]
    out_ptr,
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    # block tables [B, max_blocks], seq_lens [B], query_start_loc [B+1], all int64
    block_tables_ptr,
    seq_lens_ptr,
    query_start_loc_ptr,
    scale,
    # a token's and a head's stride in q and in out
    stride_qt,
    stride_qh,
    stride_ot,
    stride_oh,
    # block, offset and head strides of the caches
    stride_kb,
    stride_ks,
    stride_kh,
    stride_vb,
    stride_vs,
    stride_vh,
    stride_bt,  # one block table row
    GROUP: tl.constexpr,  # query heads per KV head (H // KV)
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,  # head_dim, and the power of two >= it that tl.arange needs
    BLOCK_SIZE: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    req = tl.program_id(0)  # which request
    tile = tl.program_id(1)  # which BLOCK_Q rows of its new tokens
    head = tl.program_id(2)  # which query head
    kv_head = head // GROUP  # GQA: the K/V this head shares with GROUP - 1 others

    q_start = tl.load(query_start_loc_ptr + req)
    q_len = tl.load(query_start_loc_ptr + req + 1) - q_start  # this request's new tokens
    # The grid is sized for the longest request: shorter ones have nothing here.
    if tile * BLOCK_Q >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + req)
    rows = tile * BLOCK_Q + tl.arange(0, BLOCK_Q)  # [BLOCK_Q] new-token index in the request
    row_ok = rows < q_len
    q_pos = seq_len - q_len + rows  # [BLOCK_Q] their positions: the new tokens end the context
    dims = tl.arange(0, BLOCK_D)
    dim_ok = dims < HEAD_DIM

    q_rows = q_ptr + (q_start + rows)[:, None] * stride_qt + head * stride_qh + dims[None, :]
    q = tl.load(q_rows, mask=row_ok[:, None] & dim_ok[None, :], other=0.0)  # [BLOCK_Q, BLOCK_D]

    m = tl.full([BLOCK_Q], float("-inf"), tl.float32)  # running max of each row's scores
    l = tl.zeros([BLOCK_Q], tl.float32)  # running sum of exp(score - m)
    acc = tl.zeros([BLOCK_Q, BLOCK_D], tl.float32)  # running sum of exp(score - m) * v
    # The tile's last row sits at position seq_len - q_len + (tile + 1) * BLOCK_Q - 1: no row
    # sees further.
    kv_end = tl.minimum(seq_len, seq_len - q_len + (tile + 1) * BLOCK_Q)
    for start in range(0, kv_end, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)  # [BLOCK_N] key positions
        key_ok = keys < kv_end
        block = tl.load(
            block_tables_ptr + req * stride_bt + keys // BLOCK_SIZE, mask=key_ok, other=0
        )
        offset = keys % BLOCK_SIZE  # where in its block each key sits
        k_rows = (
            k_cache_ptr
            + block[:, None] * stride_kb
            + offset[:, None] * stride_ks
            + kv_head * stride_kh
        )
        v_rows = (
            v_cache_ptr
            + block[:, None] * stride_vb
            + offset[:, None] * stride_vs
            + kv_head * stride_vh
        )
        kv_mask = key_ok[:, None] & dim_ok[None, :]
        k = tl.load(k_rows + dims[None, :], mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
        v = tl.load(v_rows + dims[None, :], mask=kv_mask, other=0.0)

        # ieee: full fp32 products, without the GPU's TF32 shortcut
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale  # [BLOCK_Q, BLOCK_N]
        visible = (keys[None, :] <= q_pos[:, None]) & key_ok[None, :]  # end-aligned causal mask
        s = tl.where(visible, s, float("-inf"))
        # Key 0 is visible to every row, so from the first tile on each row's max is finite: no
        # NaN below.
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])  # [BLOCK_Q, BLOCK_N]
        alpha = tl.exp(m - m_new)  # rescales what was summed under the old max
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m = m_new

    o = acc / l[:, None]
    o_rows = out_ptr + (q_start + rows)[:, None] * stride_ot + head * stride_oh + dims[None, :]
    tl.store(o_rows, o.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & dim_ok[None, :])


def triton_paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    max_query_len: int,
    scale: float,
) -> torch.Tensor:
    """Launch the kernel: q [N, H, hd], caches [num_blocks, block_size, KV, hd],
    block_tables [B, max_blocks], seq_lens [B], query_start_loc [B+1] (int64, on q's device,
    already checked by the caller); out [N, H, hd].

    max_query_len (host int, the longest request's new tokens) sizes the grid's query-tile axis.
    """
    N, H, hd = q.shape
    KV = k_cache.shape[2]
    out = torch.empty_like(q)
    B = seq_lens.shape[0]
    grid = (B, triton.cdiv(max_query_len, BLOCK_Q), H)
    paged_attention_kernel[grid](
        out,
        q,
        k_cache,
        v_cache,
        block_tables,
        seq_lens,
        query_start_loc,
        scale,
        q.stride(0),
        q.stride(1),
        out.stride(0),
        out.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        block_tables.stride(0),
        GROUP=H // KV,
        HEAD_DIM=hd,
        BLOCK_D=max(16, triton.next_power_of_2(hd)),
        BLOCK_SIZE=k_cache.shape[1],
        BLOCK_Q=BLOCK_Q,
        BLOCK_N=BLOCK_N,
    )
    return out
