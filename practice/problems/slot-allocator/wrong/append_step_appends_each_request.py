"""Wrong: append_step checks every request first, then calls append once per request: the right
values and no error half-way, but N writes where the task asks for one.

Caught by: test_append_step_writes_once_whatever_the_number_of_requests.
"""

import torch


class OutOfSlotsError(RuntimeError):
    """Every slot is taken."""


class SlotKVCache:
    """k, v: [max_batch, max_ctx, num_kv_heads, head_dim]; each running request owns one row
    (its slot)."""

    def __init__(self, max_batch: int, max_ctx: int, num_kv_heads: int, head_dim: int):
        self.k = torch.zeros(max_batch, max_ctx, num_kv_heads, head_dim)
        self.v = torch.zeros(max_batch, max_ctx, num_kv_heads, head_dim)
        self.max_ctx = max_ctx
        self.owner = [None] * max_batch  # request id per slot, None when free
        self.lengths = [0] * max_batch  # tokens stored per slot
        self.request_to_slot: dict = {}  # request id -> slot

    def allocate_slot(self, request_id) -> int:
        """The lowest free slot, empty, now owned by request_id."""
        if request_id in self.request_to_slot:
            raise ValueError(
                f"request {request_id!r} already holds slot {self.request_to_slot[request_id]}"
            )
        if None not in self.owner:
            raise OutOfSlotsError(f"all {len(self.owner)} slots are taken")
        slot = self.owner.index(None)
        self.owner[slot], self.lengths[slot], self.request_to_slot[request_id] = (
            request_id,
            0,
            slot,
        )
        return slot

    def free_slot(self, request_id) -> None:
        """Free the request's slot."""
        slot = self.slot_of(request_id)
        del self.request_to_slot[request_id]
        self.owner[slot] = None

    def slot_of(self, request_id) -> int:
        if request_id not in self.request_to_slot:
            raise ValueError(f"request {request_id!r} holds no slot")
        return self.request_to_slot[request_id]

    def append(
        self, request_id, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v [T, kv_heads, head_dim] after the slot's tokens; return the history
        [length, kv_heads, head_dim]."""
        slot = self.slot_of(request_id)
        start, end = self.lengths[slot], self.lengths[slot] + k.shape[0]
        if end > self.max_ctx:
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
        seen = set()
        for request_id in request_ids:
            if request_id in seen:  # two writes to one (slot, offset): only one would land
                raise ValueError(f"request {request_id!r} appears twice in one step")
            seen.add(request_id)
        slots = [self.slot_of(r) for r in request_ids]  # ValueError for a request without one
        for request_id, slot in zip(request_ids, slots):
            if self.lengths[slot] == self.max_ctx:
                raise ValueError(
                    f"request {request_id!r} already holds max_ctx={self.max_ctx} tokens"
                )
        for i, request_id in enumerate(request_ids):  # every request checked above
            self.append(request_id, k[i : i + 1], v[i : i + 1])
        rows = torch.tensor(slots)  # [N]
        lengths = [self.lengths[s] for s in slots]
        longest = max(lengths)
        return self.k[rows, :longest], self.v[rows, :longest], lengths

    def used_tokens(self) -> int:
        return sum(self.lengths[s] for s in self.request_to_slot.values())

    def claimed_tokens(self) -> int:
        return len(self.request_to_slot) * self.max_ctx
