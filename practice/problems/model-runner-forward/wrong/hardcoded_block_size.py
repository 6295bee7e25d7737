"""Wrong: computes its own slots with the example's block size of 4 instead of using
slot_mapping.

Caught by: test_backend_attend_writes_then_attends.
"""

import torch

from minillm.paged import paged_attention  # noqa: F401  (you will need it)


class PagedBackend:
    """The attention backend of one step over a PagedKVCache: write the new K/V, then attend
    through the block tables."""

    def __init__(
        self,
        kv,
        block_tables: list[list[int]],
        seq_lens: list[int],
        query_start_loc: list[int],
        slot_mapping: torch.Tensor,
    ):
        self.kv, self.block_tables, self.seq_lens = kv, block_tables, seq_lens
        self.query_start_loc, self.slot_mapping = query_start_loc, slot_mapping

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
    ) -> torch.Tensor:
        """q [N, H, hd], k, v [N, KV, hd] of the step's new tokens -> [N, H, hd]."""
        positions = [
            p
            for i, s in enumerate(self.seq_lens)
            for p in range(s - (self.query_start_loc[i + 1] - self.query_start_loc[i]), s)
        ]
        owners = [
            i
            for i in range(len(self.seq_lens))
            for _ in range(self.query_start_loc[i + 1] - self.query_start_loc[i])
        ]
        slots = [self.block_tables[i][p // 4] * 4 + p % 4 for i, p in zip(owners, positions)]
        self.kv.write(layer, slots, k, v)
        return paged_attention(
            q, self.kv, layer, self.block_tables, self.seq_lens, self.query_start_loc, scale
        )


@torch.no_grad()
def runner_forward(model, kv, batch) -> torch.Tensor:
    """model: minillm Transformer; kv: PagedKVCache; batch: BatchInput -> logits [M, vocab] at
    batch.logits_indices."""
    backend = PagedBackend(
        kv, batch.block_tables, batch.seq_lens, batch.query_start_loc, batch.slot_mapping
    )
    return model(batch.input_ids, batch.positions, backend, logits_indices=batch.logits_indices)
