"""One mixed forward: the attention of a step as one block-diagonal attention over the flat
batch, and the runner's call of the model's own forward."""

import torch


class PagedBackend:
    """The attention backend of one step over a PagedKVCache. Built once per step, on the host:
    every request's context side by side, and the mask that keeps the requests apart. Then, in
    every layer, one write and one masked attention over the whole flat batch."""

    def __init__(
        self,
        kv,
        block_tables: list[list[int]],
        seq_lens: list[int],
        query_start_loc: list[int],
        slot_mapping: torch.Tensor,
    ):
        self.kv, self.slot_mapping = kv, slot_mapping
        bs = kv.block_size
        key_slots, key_req, key_pos, query_req, query_pos = [], [], [], [], []
        for i, (table, seq_len) in enumerate(zip(block_tables, seq_lens)):
            n = query_start_loc[i + 1] - query_start_loc[i]
            # the context in position order: position p is at offset p % bs of block p // bs
            key_slots += [table[p // bs] * bs + p % bs for p in range(seq_len)]
            key_req += [i] * seq_len
            key_pos += range(seq_len)
            query_req += [i] * n
            query_pos += range(seq_len - n, seq_len)  # the new tokens are the context's last n
        device = kv.device
        self.key_slots = torch.tensor(key_slots, dtype=torch.long, device=device)  # [S]
        qr, kr, qp, kp = (
            torch.tensor(x, dtype=torch.long, device=device)
            for x in (query_req, key_req, query_pos, key_pos)
        )
        # [N, S]: a query reads its own request's keys (block diagonal) up to its own position
        self.mask = (qr[:, None] == kr[None, :]) & (kp[None, :] <= qp[:, None])

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
    ) -> torch.Tensor:
        """q [N, H, hd], k, v [N, KV, hd] of the step's new tokens -> [N, H, hd]."""
        self.kv.write(layer, self.slot_mapping, k, v)  # every new token first: each sees itself
        keys = self.kv.k[layer].flatten(0, 1)[self.key_slots]  # [S, KV, hd]: all the contexts
        values = self.kv.v[layer].flatten(0, 1)[self.key_slots]
        group = q.shape[1] // keys.shape[1]  # query heads per KV head
        keys = keys.repeat_interleave(group, dim=1)  # [S, H, hd]: head h reads h // group
        values = values.repeat_interleave(group, dim=1)
        scores = torch.einsum("nhd,shd->hns", q, keys) * scale  # [H, N, S]
        weights = scores.masked_fill(~self.mask, float("-inf")).softmax(dim=-1)
        return torch.einsum("hns,shd->nhd", weights, values)  # [N, H, hd]


@torch.no_grad()
def runner_forward(model, kv, batch) -> torch.Tensor:
    """model: minillm Transformer; kv: PagedKVCache; batch: BatchInput -> logits [M, vocab] at
    batch.logits_indices."""
    backend = PagedBackend(
        kv, batch.block_tables, batch.seq_lens, batch.query_start_loc, batch.slot_mapping
    )
    return model(batch.input_ids, batch.positions, backend, logits_indices=batch.logits_indices)
