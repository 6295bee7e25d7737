"""slots.py — many requests, one KV cache: every request owns a fixed slot of max_ctx tokens.

The first way to serve several requests at once: make the cache of chapter 2 one dimension
bigger. Per layer, K and V become [max_batch, max_ctx, kv_heads, head_dim]; a request is handed
a slot (a row) when it arrives and gives it back when it finishes, and the slot's offset (its
number of stored tokens) says where its next token goes. Prefill runs one request per forward;
decode runs either one request per forward or every running request in one forward
(`one_forward_decode_step`). The shared buffer makes that step's store one indexed write and its
gather one indexed read; `PrivateBatchView` runs the same forward over private caches with N of
each.

The price is memory: each slot reserves max_ctx tokens whether the request uses 30 or 30,000.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from minillm.kv_cache import KVCache, forward_cached, kv_bytes_per_token
from minillm.model import Transformer


class OutOfSlotsError(RuntimeError):
    """Every slot is taken; nothing was allocated."""


class SlotKVCache:
    """Per layer, K and V [max_batch, max_ctx, kv_heads, hd]; slot s holds one request's tokens
    0..lengths[s]-1."""

    def __init__(
        self,
        num_layers: int,
        max_batch: int,
        max_ctx: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device="cpu",
    ):
        if max_batch < 1 or max_ctx < 1:
            raise ValueError(f"max_batch={max_batch}, max_ctx={max_ctx}: expected both >= 1")
        shape = (max_batch, max_ctx, num_kv_heads, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.max_batch, self.max_ctx = max_batch, max_ctx
        self.lengths = [0] * max_batch  # the per-slot offset: tokens stored in each slot
        self.request_to_slot: dict = {}
        self.free_slots = list(range(max_batch))  # lowest first, so runs are reproducible

    @classmethod
    def for_model(cls, model: Transformer, max_batch: int, max_ctx: int) -> SlotKVCache:
        cfg, p = model.cfg, model.embed_tokens.weight
        return cls(
            cfg.num_hidden_layers,
            max_batch,
            max_ctx,
            cfg.num_key_value_heads,
            cfg.hd,
            p.dtype,
            p.device,
        )

    @property
    def num_free(self) -> int:
        return len(self.free_slots)

    def allocate_slot(self, request_id) -> int:
        """Give `request_id` the lowest free slot, empty (offset 0)."""
        if request_id in self.request_to_slot:
            raise ValueError(
                f"request {request_id!r} already holds slot {self.request_to_slot[request_id]}"
            )
        if not self.free_slots:
            raise OutOfSlotsError(
                f"all {self.max_batch} slots are taken (by requests "
                f"{list(self.request_to_slot)}); "
                f"request {request_id!r} must wait until one is freed"
            )
        slot = self.free_slots.pop(0)
        self.request_to_slot[request_id] = slot
        self.lengths[slot] = (
            0  # stale K/V from the last owner stay, but offset 0 means none is ever read
        )
        return slot

    def free_slot(self, request_id) -> None:
        slot = self.slot_of(request_id)
        del self.request_to_slot[request_id]
        self.lengths[slot] = 0
        self.free_slots.append(slot)
        self.free_slots.sort()

    def slot_of(self, request_id) -> int:
        if request_id not in self.request_to_slot:
            raise ValueError(
                f"request {request_id!r} holds no slot: expected one of "
                f"{list(self.request_to_slot)}"
            )
        return self.request_to_slot[request_id]

    def view(self, request_id) -> SlotView:
        """The request's slot seen as a one-sequence cache, which `Transformer.forward`
        accepts."""
        return SlotView(self, self.slot_of(request_id))

    def reserved_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    def used_bytes(self) -> int:
        per_token = self.reserved_bytes() // (self.max_batch * self.max_ctx)
        return sum(self.lengths) * per_token


class SlotView:
    """One slot seen as chapter 2's `KVCache`: `.length`, `.max_len`, `.update(layer, k, v)`,
    `.attend(...)`, `.advance(n)`.

    The model never learns it shares a cache: it sees a batch-1 attention backend whose rows
    live in slot `slot`.
    """

    def __init__(self, cache: SlotKVCache, slot: int):
        self.cache, self.slot = cache, slot

    @property
    def length(self) -> int:
        return self.cache.lengths[self.slot]

    @property
    def max_len(self) -> int:
        return self.cache.max_ctx

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Write k, v [1, T, KV, hd] at the slot's offset; return the slot's whole history [1,
        offset+T, KV, hd]."""
        if k.shape[0] != 1:
            raise ValueError(f"a slot holds one sequence, got a batch of {k.shape[0]}")
        start, end = self.length, self.length + k.shape[1]
        if end > self.cache.max_ctx:
            raise ValueError(
                f"slot {self.slot} holds {self.cache.max_ctx} tokens; position {end - 1} does "
                "not fit"
            )
        s = self.slot
        self.cache.k[layer][s, start:end] = k[0]
        self.cache.v[layer][s, start:end] = v[0]
        return self.cache.k[layer][s : s + 1, :end], self.cache.v[layer][s : s + 1, :end]

    # the same backend step as chapter 2's cache: store, then attend over the history
    attend = KVCache.attend

    def advance(self, n: int) -> None:
        self.cache.lengths[self.slot] += n


def write_step(
    cache: SlotKVCache, slots: list[int], k: list[torch.Tensor], v: list[torch.Tensor]
) -> None:
    """Store one new token for each of N distinct slots, in every layer, at each slot's offset.

    k[layer], v[layer]: [N, kv_heads, head_dim], in the order of `slots`. One indexed write per
    layer and tensor, instead of N `SlotView.update` calls; like `update`, it leaves the offsets
    as they are. Checks every slot before it writes anything.
    """
    rows, cols = _step_index(cache, slots)
    write_rows(cache, rows, cols, k, v)


def write_rows(
    cache: SlotKVCache,
    rows: torch.Tensor,
    offsets: torch.Tensor,
    k: list[torch.Tensor],
    v: list[torch.Tensor],
) -> None:
    """`write_step` without its checks: per layer, k[layer], v[layer] [N, kv_heads, head_dim]
    into slot rows[i] at offsets[i] (rows, offsets [N]): one indexed write per layer and
    tensor."""
    for layer in range(len(cache.k)):
        cache.k[layer][rows, offsets] = k[layer]
        cache.v[layer][rows, offsets] = v[layer]


def gather_rows(
    cache: SlotKVCache, rows: torch.Tensor, longest: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, (K, V) of slots `rows` [N] up to `longest` positions, one indexed read each,
    as `SlotBatchView.attend` gathers: [N, longest, kv_heads, head_dim], copies."""
    return [(k[rows, :longest], v[rows, :longest]) for k, v in zip(cache.k, cache.v)]


def _step_index(cache: SlotKVCache, slots: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Check that each of `slots` can take one more token; return (slots, offsets) as [N]
    tensors."""
    if len(set(slots)) != len(slots):
        raise ValueError(
            f"slots {slots}: a slot appears twice, so one of its writes would be lost"
        )
    for s in slots:
        if not 0 <= s < cache.max_batch:
            raise ValueError(f"slot {s} does not exist: the cache has {cache.max_batch} slots")
        if cache.lengths[s] >= cache.max_ctx:
            raise ValueError(f"slot {s} already holds max_ctx={cache.max_ctx} tokens")
    device = cache.k[0].device
    rows = torch.tensor(slots, device=device)
    cols = torch.tensor([cache.lengths[s] for s in slots], device=device)
    return rows, cols


class SlotBatchView:
    """N running slots seen as one attention backend for one decode step: the model gets the N
    new tokens as a batch [N, 1] and never learns that the rows live in different slots.

    Each layer stores the N new K/V with `write_step`'s one indexed write, then attends over
    the N histories padded to the longest, `k[layer][slots, :longest]`, with a mask that hides
    each row's positions past its own length. A masked key gets weight 0, but 0 x NaN is NaN:
    safe because the buffers start as zeros and only finite K/V are ever written.
    """

    def __init__(self, cache: SlotKVCache, slots: list[int]):
        self.cache, self.slots = cache, slots
        self.rows, self.offsets = _step_index(cache, slots)  # [N], [N]: where new tokens go
        self.seq_lens = [cache.lengths[s] + 1 for s in slots]  # each history after the step
        longest = max(self.seq_lens)
        seen = torch.arange(longest, device=self.rows.device) < self.offsets[:, None] + 1
        self.mask = seen[:, None, None, :]  # [N, 1, 1, longest]: row i sees 0..seq_lens[i]-1

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
    ) -> torch.Tensor:
        """q [N, 1, H, hd], k, v [N, 1, KV, hd] -> [N, 1, H, hd]."""
        self.cache.k[layer][self.rows, self.offsets] = k[:, 0]
        self.cache.v[layer][self.rows, self.offsets] = v[:, 0]
        longest = self.mask.shape[-1]
        k_all = self.cache.k[layer][self.rows, :longest]  # [N, longest, KV, hd]
        v_all = self.cache.v[layer][self.rows, :longest]
        return _masked_attention(q, k_all, v_all, self.mask, scale)

    def advance(self) -> None:
        """Count the step's token in every slot, once every layer has stored it."""
        for s in self.slots:
            self.cache.lengths[s] += 1


def _masked_attention(q, k_all, v_all, mask, scale) -> torch.Tensor:
    """q [N, 1, H, hd] over padded histories k_all, v_all [N, longest, KV, hd], under mask [N,
    1, 1, longest] -> [N, 1, H, hd]."""
    H = q.shape[2]
    k_all = k_all.repeat_interleave(H // k_all.shape[2], dim=2)  # [N, longest, H, hd]
    v_all = v_all.repeat_interleave(H // v_all.shape[2], dim=2)
    o = F.scaled_dot_product_attention(
        q.transpose(1, 2),
        k_all.transpose(1, 2),
        v_all.transpose(1, 2),
        attn_mask=mask,
        scale=scale,
    )  # [N, H, 1, hd]
    return o.transpose(1, 2)


class PrivateBatchView:
    """`SlotBatchView` over N private chapter-2 `KVCache`s (batch 1 each) instead of one shared
    tensor: the same batch [N, 1], mask and attention, but each layer stores the N new K/V with
    N slice writes and gathers the N histories by slicing each cache to the longest (padding a
    shorter cache with zeros) and stacking them."""

    def __init__(self, caches: list[KVCache]):
        for i, c in enumerate(caches):
            if c.k[0].shape[0] != 1 or c.length >= c.max_len:
                raise ValueError(
                    f"cache {i}: expected one sequence with room for one more token, got batch "
                    f"{c.k[0].shape[0]}, {c.length} of {c.max_len} tokens"
                )
        self.caches = caches
        self.seq_lens = [c.length + 1 for c in caches]  # each history after the step
        offsets = torch.tensor([c.length for c in caches], device=caches[0].k[0].device)
        seen = torch.arange(max(self.seq_lens), device=offsets.device) < offsets[:, None] + 1
        self.mask = seen[:, None, None, :]  # [N, 1, 1, longest], as SlotBatchView's

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
    ) -> torch.Tensor:
        """q [N, 1, H, hd], k, v [N, 1, KV, hd] -> [N, 1, H, hd]."""
        longest = self.mask.shape[-1]
        for i, c in enumerate(self.caches):  # N slice writes, one per private cache
            c.k[layer][0, c.length] = k[i, 0]
            c.v[layer][0, c.length] = v[i, 0]
        # [N, longest, KV, hd], a copy, as SlotBatchView's indexed gather
        k_all = torch.stack([_padded(c.k[layer][0, :longest], longest) for c in self.caches])
        v_all = torch.stack([_padded(c.v[layer][0, :longest], longest) for c in self.caches])
        return _masked_attention(q, k_all, v_all, self.mask, scale)

    def advance(self) -> None:
        """Count the step's token in every cache, once every layer has stored it."""
        for c in self.caches:
            c.length += 1


def _padded(history: torch.Tensor, longest: int) -> torch.Tensor:
    """[T, KV, hd] -> [longest, KV, hd], zeros after T (a cache shorter than the longest)."""
    short = longest - history.shape[0]
    return F.pad(history, (0, 0, 0, 0, 0, short)) if short else history


@torch.no_grad()
def prefill(
    model: Transformer, cache: SlotKVCache, request_id, prompt_ids: list[int]
) -> torch.Tensor:
    """Run the prompt into the request's (empty) slot; return the last position's logits [V]."""
    slot = cache.slot_of(request_id)
    if not prompt_ids:
        raise ValueError(
            f"request {request_id!r} has an empty prompt: expected at least one token"
        )
    if cache.lengths[slot] != 0:
        raise ValueError(
            f"request {request_id!r} already has {cache.lengths[slot]} tokens in slot {slot}: "
            "prefill expects an empty slot"
        )
    return _run(model, cache, request_id, slot, prompt_ids)


@torch.no_grad()
def decode(model: Transformer, cache: SlotKVCache, request_id, token: int) -> torch.Tensor:
    """Run one new token after the request's history; return its logits [V]."""
    slot = cache.slot_of(request_id)
    if cache.lengths[slot] == 0:
        raise ValueError(
            f"request {request_id!r} has an empty slot {slot}: prefill it before decoding"
        )
    return _run(model, cache, request_id, slot, [token])


def _run(model, cache, request_id, slot, token_ids) -> torch.Tensor:
    end = cache.lengths[slot] + len(token_ids)
    # checked before the model writes anything, so the slot stays as it was
    if end > cache.max_ctx:
        raise ValueError(
            f"request {request_id!r} would reach {end} tokens, "
            f"but slot {slot} holds max_ctx={cache.max_ctx}"
        )
    model.check_token_ids(token_ids)
    ids = torch.tensor([token_ids], device=cache.k[0].device)
    return forward_cached(model, cache.view(request_id), ids)[0]  # [V]


@dataclass
class SlotRequest:
    """One request's state between steps: its slot, the tokens generated so far and their
    logits."""

    request_id: object
    prompt_ids: list[int]
    max_new_tokens: int
    slot: int = -1
    generated: list[int] = field(default_factory=list)
    logits: list[torch.Tensor] = field(
        default_factory=list
    )  # the [V] logits each new token came from

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(
                f"request {self.request_id!r} asks for {self.max_new_tokens} new tokens: "
                "expected >= 1"
            )

    @property
    def finished(self) -> bool:
        return len(self.generated) >= self.max_new_tokens


def batch_prefill(model: Transformer, cache: SlotKVCache, requests: list[SlotRequest]) -> None:
    """Give each request a slot and prefill it, one request per forward (serial, first come
    first served).

    The prefill yields each request's first new token; a request that is then finished frees its
    slot.
    """
    if len(requests) > cache.num_free:  # refuse the whole batch rather than admit part of it
        raise OutOfSlotsError(
            f"{len(requests)} requests need slots "
            f"but only {cache.num_free} of {cache.max_batch} are free"
        )
    for r in requests:
        r.slot = cache.allocate_slot(r.request_id)
        try:
            logits = prefill(model, cache, r.request_id, r.prompt_ids)
        except Exception:
            cache.free_slot(
                r.request_id
            )  # a request that failed to start does not keep its slot
            r.slot = -1
            raise
        _take(r, logits)
        if r.finished:  # a request that wanted one token is done after its prefill
            cache.free_slot(r.request_id)


def batch_decode_step(
    model: Transformer, cache: SlotKVCache, requests: list[SlotRequest]
) -> None:
    """One decode step for every unfinished request, one forward each; finished requests free
    their slot."""
    for r in requests:
        if not r.finished:
            _take(r, decode(model, cache, r.request_id, r.generated[-1]))
        if r.finished and r.request_id in cache.request_to_slot:
            cache.free_slot(r.request_id)


@torch.no_grad()
def one_forward_decode_step(
    model: Transformer, cache: SlotKVCache, requests: list[SlotRequest]
) -> list[int]:
    """`batch_decode_step` in one forward: every unfinished request's next token, as a batch
    [N, 1] over their slots. Finished requests free their slot. Returns the N history lengths
    the step attended over (each request's, including its new token)."""
    running = [r for r in requests if not r.finished]
    if not running:
        return []
    slots = [cache.slot_of(r.request_id) for r in running]
    for r, s in zip(running, slots):  # checked before any layer writes
        if cache.lengths[s] == 0:
            raise ValueError(
                f"request {r.request_id!r} has an empty slot {s}: prefill it before decoding"
            )
    ids = [r.generated[-1] for r in running]
    model.check_token_ids(ids)
    batch = SlotBatchView(cache, slots)  # checks every slot can take one more token
    input_ids = torch.tensor(ids, device=cache.k[0].device)[:, None]  # [N, 1]
    logits = model(input_ids, batch.offsets[:, None], batch, logits_indices=[-1])  # [N, 1, V]
    batch.advance()
    for r, row in zip(running, logits[:, -1]):
        _take(r, row)
        if r.finished:
            cache.free_slot(r.request_id)
    return batch.seq_lens


def _take(r: SlotRequest, logits: torch.Tensor) -> None:
    r.logits.append(logits)
    r.generated.append(int(logits.argmax()))  # greedy, as kv_cache.generate


def reserved_kv_bytes(
    num_slots: int,
    max_ctx: int,
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    bytes_per_element: int = 2,
) -> int:
    """What fixed slots cost up front: every slot reserves max_ctx tokens of K and V in every
    layer."""
    return (
        num_slots
        * max_ctx
        * kv_bytes_per_token(num_layers, num_kv_heads, head_dim, bytes_per_element)
    )


def sample_length_mix(
    num_requests: int, seed: int = 0, max_ctx: int = 65_536
) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths of a seeded, long-tailed request mix (log-normal, like chat
    traffic).

    Most prompts are a few hundred tokens and most answers a few hundred more, but a few
    documents run to tens of thousands; prompt + output is clipped to max_ctx.
    """
    rng = np.random.default_rng(seed)
    prompt = np.clip(
        rng.lognormal(mean=np.log(600), sigma=1.3, size=num_requests), 8, max_ctx // 2
    ).astype(int)
    output = np.clip(
        rng.lognormal(mean=np.log(250), sigma=1.0, size=num_requests), 1, max_ctx - prompt
    ).astype(int)
    return prompt, output
