"""backend.py — the Triton kernels as an attention backend: the same seam, the same metadata,
other code.

`TritonAttention` is chapter 4's `PagedAttention` (its checks, its padded block tables) whose
`attend` writes K/V with `reshape_and_cache_kernel` and attends with `paged_attention_kernel`,
one launch each per layer for the whole mixed batch: no per-request loop. A step of decodes only
takes the kernels of split_decode.py instead: the group's query heads packed into one program,
each context split into merged segments of the length `decode_segment` picks for the step.
"""

from __future__ import annotations

import torch

from minillm.kernels.cache_write import triton_cache_write
from minillm.kernels.split_decode import decode_segment, split_decode_attention
from minillm.kernels.triton_attention import triton_paged_attention
from minillm.kernels.triton_runtime import interpreting, multiprocessors
from minillm.paged import PagedAttention, PagedKVCache


class TritonAttention(PagedAttention):
    """Built once per forward from the step's metadata, like PagedAttention (same arguments,
    same checks)."""

    def __init__(
        self, kv: PagedKVCache, block_tables, seq_lens, query_start_loc, slot_mapping=None
    ):
        if kv.device.type == "cpu" and not interpreting():
            raise ValueError(
                "the Triton backend got a cache on the CPU, but Triton is compiling for a GPU "
                "here (TRITON_INTERPRET is not set): put the model on CUDA, or set "
                "TRITON_INTERPRET=1 before anything imports triton to run the kernels in "
                "Triton's interpreter"
            )
        super().__init__(kv, block_tables, seq_lens, query_start_loc, slot_mapping)
        device = kv.device
        self.seq_lens_t = torch.tensor(self.seq_lens, dtype=torch.long, device=device)  # [B]
        self.query_start_loc_t = torch.tensor(
            self.query_start_loc, dtype=torch.long, device=device
        )  # [B+1]
        self.max_query_len = max(
            b - a for a, b in zip(self.query_start_loc, self.query_start_loc[1:])
        )
        # sizes the segment axis of the flash-decoding grid
        self.max_seq_len = max(self.seq_lens)
        # keys per decode program: the shortest walk, the merge charged (decode_segment)
        self.segment = decode_segment(self.seq_lens, kv.num_kv_heads, multiprocessors(device))

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
    ) -> torch.Tensor:
        """q [N, H, hd], k, v [N, KV, hd]: store the new K/V through the slot mapping, then
        attend, both as kernels."""
        if self.slot_mapping is None:
            raise ValueError(
                "this TritonAttention was built without a slot_mapping, so it cannot store K/V"
            )
        triton_cache_write(k, v, self.kv.k[layer], self.kv.v[layer], self.slot_mapping)
        return (
            self.decode(layer, q, scale) if self.decode_only else self.varlen(layer, q, scale)
        )

    def varlen(self, layer: int, q: torch.Tensor, scale: float) -> torch.Tensor:
        """Any mix of prefills, chunks and decodes, in one launch (replaces the reference's
        per-request loop)."""
        return triton_paged_attention(
            q.contiguous(),
            self.kv.k[layer],
            self.kv.v[layer],
            self.block_tables,
            self.seq_lens_t,
            self.query_start_loc_t,
            self.max_query_len,
            scale,
        )

    def decode(self, layer: int, q: torch.Tensor, scale: float) -> torch.Tensor:
        """Only decodes (q [B, H, hd]): the segment kernel, each context split into segments
        merged at the end, or one segment each (self.segment decides)."""
        return split_decode_attention(
            q,
            self.kv.k[layer],
            self.kv.v[layer],
            self.block_tables,
            self.seq_lens_t,
            self.max_seq_len,
            scale,
            self.segment,
        )


def triton_attention(
    q: torch.Tensor,
    kv: PagedKVCache,
    layer: int,
    block_tables: list[list[int]],
    seq_lens: list[int],
    query_start_loc: list[int],
    scale: float,
) -> torch.Tensor:
    """`paged_attention`'s signature and checks, computed by the kernel: q [N, H, hd] against
    K/V already cached."""
    from minillm.checking import check_int
    from minillm.paged import check_queries

    attn = TritonAttention(kv, block_tables, seq_lens, query_start_loc)
    check_queries(q, kv, attn.num_tokens)
    return attn.varlen(check_int("layer", layer, min=0, max=kv.num_layers - 1), q, scale)
