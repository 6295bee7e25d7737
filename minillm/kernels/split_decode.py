"""split_decode.py — flash-decoding: a decode step's attention split over segments of the
context.

With one new token per request, the mixed-batch kernel has B x H programs, each walking a whole
context alone: a few long requests leave most of a GPU idle. Here each program takes one
segment (SEGMENT keys or more) of one request for one KV head, and its rows are the GROUP query
heads that share that KV head (vLLM packs them the same way), so each K/V row is loaded once per
group, not once per query head. Every program leaves a partial result (output, max, sum) of
its segment; a second kernel merges a request's segments with the online-softmax rule, 16
segments at a time: weights l_s * exp(m_s - max), then one division.

`decode_segment` picks the segment length per step: the one whose busiest multiprocessor walks
the fewest keys, the programs dealt to the multiprocessors longest first (`busiest_walk`), with
the merge charged a fixed MERGE_KEYS. A step it does not split is one launch of the segment
kernel with one segment per context, writing the output itself.
"""

from __future__ import annotations

import heapq
import math

import torch

from minillm.kernels.triton_runtime import load_triton

triton = load_triton()
import triton.language as tl  # noqa: E402

BLOCK_N = 32  # keys per step of a segment's loop
SEGMENT = 256  # the shortest segment decode_segment picks (a multiple of BLOCK_N)
MERGE_CHUNK = 16  # segments the merge holds at once: its tile is [16, head_dim] at any context
# The merge's fixed cost, in keys of one program's walk: stated assumptions for an H100 SXM and
# Qwen3-0.6B's K/V (head_dim 128, bf16, 2 query heads per KV head), not measurements.
MERGE_LAUNCH_S = 5e-6  # the merge: its launch and its short run, once the segment kernel ends
SM_BYTES_PER_S = 3.35e12 / 132  # one multiprocessor's share of HBM: 25.4 GB/s
KEY_BYTES = 2 * 128 * 2  # K and V of one key for one KV head: 512 bytes
PARTIAL_BYTES = 2 * 2 * (128 + 2) * 4  # one program's (o, m, l), 2 heads, written and read back
# (5e-6 x 25.4e9 + 2,080) / 512 = 252 keys, rounded up to whole tiles: 256
MERGE_KEYS = BLOCK_N * math.ceil(
    (MERGE_LAUNCH_S * SM_BYTES_PER_S + PARTIAL_BYTES) / KEY_BYTES / BLOCK_N
)
# margin for what the walk still leaves out: the other programs' partial results (4 keys per
# program) and the GPU's own order of dealing programs (busiest_walk deals longest first)
MIN_SPLIT_GAIN = 1.25


def busiest_walk(seq_lens: list[int], segment: int, kv_heads: int, sms: int) -> int:
    """Keys walked by the busiest of `sms` multiprocessors when each context of `seq_lens` is
    cut into programs of `segment` keys (the last one shorter), one per KV head, and the
    programs are dealt longest first, each to the multiprocessor with the fewest keys so far.

    Dealt so, short programs fill the multiprocessors beside a long one: a step's walk is no
    longer than its longest program or its keys spread evenly, whichever is more, plus at most
    one program.
    """
    full = kv_heads * sum(n // segment for n in seq_lens)  # programs of a whole segment
    # whole segments first, all equally long: dealt in turn, each multiprocessor gets
    # full // sms of them or one more
    loads = [(full // sms + (sm < full % sms)) * segment for sm in range(sms)]
    heapq.heapify(loads)  # the least-loaded multiprocessor first
    for rest in sorted((n % segment for n in seq_lens if n % segment), reverse=True):
        for _ in range(kv_heads):  # each context's shorter last program, once per KV head
            heapq.heapreplace(loads, loads[0] + rest)
    return max(loads)


def decode_segment(seq_lens: list[int], kv_heads: int, sms: int) -> int:
    """Keys per program of the segment kernel for a step of decodes of contexts `seq_lens` on
    `sms` multiprocessors.

    The model: a segment length cuts each context into programs of that many keys, one per KV
    head; the step lasts as long as the busiest multiprocessor's walk (`busiest_walk`, programs
    dealt longest first). The segment minimises that walk, among SEGMENT, 2 x SEGMENT,
    4 x SEGMENT, ... below the longest context, and the whole longest context (one segment per
    request, no merge). Ties go to the longer segment: fewer partial results to merge. A split
    costs its walk plus the merge, MERGE_KEYS; it is kept only if the unsplit walk is at least
    MIN_SPLIT_GAIN times that. One context alone, split, walks SEGMENT keys plus MERGE_KEYS,
    and unsplit its own length: it stays one launch up to 639 keys and splits from
    1.25 x (256 + 256) = 640.
    """
    max_seq_len = max(seq_lens)
    whole = triton.cdiv(max_seq_len, BLOCK_N) * BLOCK_N  # whole tiles, one segment

    candidates = [whole]
    segment = SEGMENT
    while segment < max_seq_len:
        candidates.append(segment)
        segment *= 2
    walks = {s: busiest_walk(seq_lens, s, kv_heads, sms) for s in candidates}
    best = min(candidates, key=lambda s: (walks[s], -s))
    if best == whole or (walks[best] + MERGE_KEYS) * MIN_SPLIT_GAIN > walks[whole]:
        return whole  # the split, merge charged, does not beat the unsplit walk by the margin
    return best


@triton.jit
def decode_segment_kernel(
    # float32 partial results: o [B, H, S, hd], m and l [B, H, S]
    part_o_ptr,
    part_m_ptr,
    part_l_ptr,
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    scale,
    stride_qb,
    stride_qh,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_vb,
    stride_vs,
    stride_vh,
    stride_bt,
    num_heads,
    max_segments,
    segment,  # keys per program, a multiple of BLOCK_N
    GROUP: tl.constexpr,
    BLOCK_G: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    req = tl.program_id(0)
    kv_head = tl.program_id(1)
    seg = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + req)
    # This request's context has fewer segments: the merge never reads this one.
    if seg * segment >= seq_len:
        return
    rows = tl.arange(0, BLOCK_G)  # [BLOCK_G] the group's query heads, padded to tl.dot's 16
    row_ok = rows < GROUP
    heads = kv_head * GROUP + rows
    dims = tl.arange(0, BLOCK_D)
    dim_ok = dims < HEAD_DIM
    q = tl.load(
        q_ptr + req * stride_qb + heads[:, None] * stride_qh + dims[None, :],
        mask=row_ok[:, None] & dim_ok[None, :],
        other=0.0,
    )  # [BLOCK_G, BLOCK_D]

    m = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    # A decode sees its whole context: no causal mask.
    seg_end = tl.minimum(seq_len, (seg + 1) * segment)
    for start in range(seg * segment, seg_end, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        key_ok = keys < seg_end
        block = tl.load(
            block_tables_ptr + req * stride_bt + keys // BLOCK_SIZE, mask=key_ok, other=0
        )
        offset = keys % BLOCK_SIZE
        kv_mask = key_ok[:, None] & dim_ok[None, :]
        k = tl.load(
            k_cache_ptr
            + block[:, None] * stride_kb
            + offset[:, None] * stride_ks
            + kv_head * stride_kh
            + dims[None, :],
            mask=kv_mask,
            other=0.0,
        )  # [BLOCK_N, BLOCK_D]
        v = tl.load(
            v_cache_ptr
            + block[:, None] * stride_vb
            + offset[:, None] * stride_vs
            + kv_head * stride_vh
            + dims[None, :],
            mask=kv_mask,
            other=0.0,
        )
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale  # [BLOCK_G, BLOCK_N]
        s = tl.where(key_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))  # finite: a segment holds at least one key
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m = m_new

    at = (req * num_heads + heads) * max_segments + seg  # [BLOCK_G] index of (req, head, seg)
    tl.store(
        part_o_ptr + at[:, None] * HEAD_DIM + dims[None, :],
        acc / l[:, None],
        mask=row_ok[:, None] & dim_ok[None, :],
    )
    tl.store(part_m_ptr + at, m, mask=row_ok)
    tl.store(part_l_ptr + at, l, mask=row_ok)


@triton.jit
def merge_segments_kernel(
    out_ptr,
    part_o_ptr,
    part_m_ptr,
    part_l_ptr,
    seq_lens_ptr,
    stride_ob,
    stride_oh,
    num_heads,
    max_segments,
    segment,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_S: tl.constexpr,  # segments merged at a time
):
    req = tl.program_id(0)
    head = tl.program_id(1)
    num_segments = tl.cdiv(tl.load(seq_lens_ptr + req), segment)
    dims = tl.arange(0, BLOCK_D)
    dim_ok = dims < HEAD_DIM
    first = (req * num_heads + head) * max_segments  # index of (req, head, segment 0)
    m = tl.full([], float("-inf"), tl.float32)  # the running max, sum and weighted output
    l = tl.full([], 0.0, tl.float32)
    acc = tl.zeros([BLOCK_D], tl.float32)
    # BLOCK_S segments at a time, merged into the running result by section 2's rule
    for start in range(0, num_segments, BLOCK_S):
        segs = start + tl.arange(0, BLOCK_S)
        seg_ok = segs < num_segments
        m_s = tl.load(part_m_ptr + first + segs, mask=seg_ok, other=float("-inf"))
        l_s = tl.load(part_l_ptr + first + segs, mask=seg_ok, other=0.0)
        o_s = tl.load(
            part_o_ptr + (first + segs)[:, None] * HEAD_DIM + dims[None, :],
            mask=seg_ok[:, None] & dim_ok[None, :],
            other=0.0,
        )  # [BLOCK_S, BLOCK_D]
        m_new = tl.maximum(m, tl.max(m_s, axis=0))  # finite: each chunk has a segment with keys
        # each sum, old and new, measured from the common max
        w = tl.where(seg_ok, l_s * tl.exp(m_s - m_new), 0.0)  # [BLOCK_S]
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(w, axis=0)
        acc = acc * alpha + tl.sum(w[:, None] * o_s, axis=0)  # [BLOCK_D]
        m = m_new
    tl.store(
        out_ptr + req * stride_ob + head * stride_oh + dims,
        (acc / l).to(out_ptr.dtype.element_ty),
        mask=dim_ok,
    )


def split_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    scale: float,
    segment: int = SEGMENT,
) -> torch.Tensor:
    """q [B, H, hd], one new token per request, the last of its context; caches,
    block_tables [B, max_blocks] and seq_lens [B] as for triton_paged_attention.
    segment: keys per program, a multiple of BLOCK_N (see decode_segment). out [B, H, hd]."""
    if segment < BLOCK_N or segment % BLOCK_N:
        raise ValueError(f"segment is {segment!r}: expected a multiple of {BLOCK_N}")
    q = q.contiguous()
    B, H, hd = q.shape
    KV = k_cache.shape[2]
    group = H // KV
    S = triton.cdiv(max_seq_len, segment)
    out = torch.empty_like(q)
    # one segment per context: its normalised output is the answer, stored into out ([B, H, hd]
    # is [B, H, 1, hd]), and no merge runs
    part_o = out if S == 1 else torch.empty(B, H, S, hd, dtype=torch.float32, device=q.device)
    part_m = torch.empty(B, H, S, dtype=torch.float32, device=q.device)
    part_l = torch.empty(B, H, S, dtype=torch.float32, device=q.device)
    decode_segment_kernel[(B, KV, S)](
        part_o,
        part_m,
        part_l,
        q,
        k_cache,
        v_cache,
        block_tables,
        seq_lens,
        scale,
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        block_tables.stride(0),
        H,
        S,
        segment,
        GROUP=group,
        BLOCK_G=max(16, triton.next_power_of_2(group)),
        HEAD_DIM=hd,
        BLOCK_D=max(16, triton.next_power_of_2(hd)),
        BLOCK_SIZE=k_cache.shape[1],
        BLOCK_N=BLOCK_N,
    )
    if S == 1:
        return out
    merge_segments_kernel[(B, H)](
        out,
        part_o,
        part_m,
        part_l,
        seq_lens,
        out.stride(0),
        out.stride(1),
        H,
        S,
        segment,
        HEAD_DIM=hd,
        BLOCK_D=triton.next_power_of_2(hd),
        BLOCK_S=MERGE_CHUNK,
    )
    return out
