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
        raise NotImplementedError("PagedBackend.__init__")

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
    ) -> torch.Tensor:
        """q [N, H, hd], k, v [N, KV, hd] of the step's new tokens -> [N, H, hd]."""
        raise NotImplementedError("PagedBackend.attend")


@torch.no_grad()
def runner_forward(model, kv, batch) -> torch.Tensor:
    """model: minillm Transformer; kv: PagedKVCache; batch: BatchInput -> logits [M, vocab] at
    batch.logits_indices."""
    raise NotImplementedError("runner_forward")
