"""Wrong: attends request by request, a Python loop in every layer's attend (chapter 4's
`varlen`), instead of one attention over the step.

Caught by: test_attend_is_one_attention_over_the_step.
"""

import torch


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
        self.kv.write(
            layer, self.slot_mapping, k, v
        )  # every new token, first: each sees itself
        k_cache, v_cache = self.kv.k[layer], self.kv.v[layer]  # [blocks, block_size, KV, hd]
        group = q.shape[1] // k_cache.shape[2]  # query heads per KV head
        out = torch.empty_like(q)  # [N, H, hd]
        for i, seq_len in enumerate(self.seq_lens):
            start, end = self.query_start_loc[i], self.query_start_loc[i + 1]
            blocks = torch.tensor(self.block_tables[i], dtype=torch.long, device=q.device)
            keys = k_cache[blocks].flatten(0, 1)[:seq_len]  # [seq_len, KV, hd], position order
            values = v_cache[blocks].flatten(0, 1)[:seq_len]
            keys = keys.repeat_interleave(
                group, dim=1
            )  # [seq_len, H, hd]: head h reads h // group
            values = values.repeat_interleave(group, dim=1)
            scores = torch.einsum("qhd,khd->hqk", q[start:end], keys) * scale  # [H, n, seq_len]
            query_pos = torch.arange(seq_len - (end - start), seq_len, device=q.device)  # [n]
            key_pos = torch.arange(seq_len, device=q.device)  # [seq_len]
            future = key_pos[None, :] > query_pos[:, None]  # [n, seq_len]: aligned to the end
            weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
            out[start:end] = torch.einsum("hqk,khd->qhd", weights, values)
        return out


@torch.no_grad()
def runner_forward(model, kv, batch) -> torch.Tensor:
    """model: minillm Transformer; kv: PagedKVCache; batch: BatchInput -> logits [M, vocab] at
    batch.logits_indices."""
    backend = PagedBackend(
        kv, batch.block_tables, batch.seq_lens, batch.query_start_loc, batch.slot_mapping
    )
    return model(batch.input_ids, batch.positions, backend, logits_indices=batch.logits_indices)
