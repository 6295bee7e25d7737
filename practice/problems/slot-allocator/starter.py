"""Many requests in one preallocated KV buffer, one fixed slot [max_ctx, kv_heads, head_dim]
each."""

import torch


class OutOfSlotsError(RuntimeError):
    """Every slot is taken."""


class SlotKVCache:
    """k, v: [max_batch, max_ctx, num_kv_heads, head_dim]; each running request owns one row
    (its slot)."""

    def __init__(self, max_batch: int, max_ctx: int, num_kv_heads: int, head_dim: int):
        # `append` below is given; it reads self.k, self.v, self.max_ctx and self.lengths (a
        # list of stored-token counts, one per slot), so create those here.
        raise NotImplementedError("SlotKVCache.__init__")

    def allocate_slot(self, request_id) -> int:
        """The lowest free slot, empty, now owned by request_id."""
        raise NotImplementedError("SlotKVCache.allocate_slot")

    def free_slot(self, request_id) -> None:
        """Free the request's slot."""
        raise NotImplementedError("SlotKVCache.free_slot")

    def slot_of(self, request_id) -> int:
        raise NotImplementedError("SlotKVCache.slot_of")

    def append(
        self, request_id, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v [T, kv_heads, head_dim] after the slot's tokens; return the history
        [length, kv_heads, head_dim]. Given: in the chapter, `SlotView.update` followed by
        `advance`."""
        slot = self.slot_of(request_id)
        start, end = self.lengths[slot], self.lengths[slot] + k.shape[0]
        if end > self.max_ctx:  # checked before anything is written
            raise ValueError(
                f"request {request_id!r} has {start} tokens; {k.shape[0]} more pass "
                f"max_ctx={self.max_ctx}"
            )
        self.k[slot, start:end], self.v[slot, start:end] = k, v
        self.lengths[slot] = end
        return self.k[slot, :end], self.v[slot, :end]

    def append_step(
        self, request_ids: list, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """One new token for each of N requests, k, v [N, kv_heads, head_dim], written with one
        indexed assignment; return the histories [N, longest, kv_heads, head_dim] and their
        lengths."""
        raise NotImplementedError("SlotKVCache.append_step")

    def used_tokens(self) -> int:
        raise NotImplementedError("SlotKVCache.used_tokens")

    def claimed_tokens(self) -> int:
        raise NotImplementedError("SlotKVCache.claimed_tokens")
