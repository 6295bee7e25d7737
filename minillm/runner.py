"""runner.py — varlen batching: many requests' new tokens in one flat forward.

Every request in a step, whatever its phase, is "n new tokens after k cached ones": a full
prefill is k = 0, a decode is n = 1, a middle chunk of a long prompt has both non-zero. We lay
all new tokens end to end ([N] instead of a padded [B, max_len]) and describe the layout with a
few metadata arrays. Only attention needs them; every other layer works token by token on the
[N, hidden] matrix, so the runner is chapter 1's forward with a paged attention backend: check
the step's metadata once, on the host, then call the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minillm.checking import as_int, check_int, check_int_list
from minillm.model import Transformer
from minillm.paged import PagedAttention, PagedKVCache, slot_mapping_for


@dataclass
class BatchInput:
    """One step's layout, as the host (CPU) builds it; the runner copies it to the device once
    per step."""

    # [N] every request's new tokens, back to back
    input_ids: torch.Tensor
    # [N] each token's position in its own sequence
    positions: torch.Tensor
    # [N] where each token's K/V are written (block * block_size + offset)
    slot_mapping: torch.Tensor
    # [B+1] request i owns tokens query_start_loc[i] : query_start_loc[i+1]
    query_start_loc: list[int]
    # [B] each request's context length once this step is done
    seq_lens: list[int]
    # [B] each request's blocks, in position order
    block_tables: list[list[int]]
    # [M] rows of N whose logits we need (a request's last token; a verify's last k+1)
    logits_indices: torch.Tensor
    # tokens per block: the slot mapping means nothing without it
    block_size: int

    @property
    def num_tokens(self) -> int:  # N
        return self.query_start_loc[-1]

    @property
    def num_reqs(self) -> int:  # B
        return len(self.seq_lens)


ITEM = (
    "(token_ids, num_computed, block_table, need_logits)"  # what build_batch takes per request
)
# need_logits: True (the last token's row), False, or a count n: the last n tokens' rows (a
# speculative verify needs the target's logits after the last token and after each of its k
# proposals: n = k + 1).


def _check_item(
    r: int, item, block_size: int, vocab_size: int | None
) -> tuple[list[int], int, list[int], int]:
    """One request's (token_ids, num_computed, block_table, need_logits), checked; names request
    r on error."""
    try:
        token_ids, num_computed, table, need_logits = item
    except (TypeError, ValueError):
        raise ValueError(f"request {r} is {item!r}: expected {ITEM}") from None
    try:
        ids, blocks = [as_int(t) for t in token_ids], [as_int(b) for b in table]
    except TypeError:
        raise ValueError(
            f"request {r} is {item!r}: token_ids and block_table must be lists of ints"
        ) from None
    if not ids:
        raise ValueError(
            f"request {r} has an empty token list: expected at least one new token"
        )
    if None in ids:
        raise ValueError(
            f"request {r} has token {list(token_ids)[ids.index(None)]!r}: expected integer "
            "token ids"
        )
    if vocab_size is not None:
        bad = [t for t in ids if not 0 <= t < vocab_size]
        if bad:
            raise ValueError(
                f"request {r} has token id {bad[0]} outside the vocabulary: expected 0 <= id "
                f"< {vocab_size}"
            )
    k = as_int(num_computed)
    if k is None or k < 0:
        raise ValueError(f"request {r} has num_computed={num_computed!r}: expected an int >= 0")
    if any(b is None or b < 0 for b in blocks):
        bad = next(b for b, c in zip(table, blocks) if c is None or c < 0)
        raise ValueError(
            f"request {r} has block id {bad!r} in its block table: expected ints >= 0"
        )
    last = k + len(ids) - 1  # the furthest position this step writes
    if last // block_size >= len(blocks):
        raise ValueError(
            f"request {r}: position {last} needs block {last // block_size}, but the block "
            "table has "
            f"{len(blocks)} blocks (block_size {block_size})"
        )
    n_logits = int(need_logits) if isinstance(need_logits, bool) else as_int(need_logits)
    if n_logits is None or not 0 <= n_logits <= len(ids):
        raise ValueError(
            f"request {r} has need_logits={need_logits!r}: expected True, False or a count "
            f"0..{len(ids)} of its last tokens"
        )
    return ids, k, blocks, n_logits


def build_batch(items, block_size: int, vocab_size: int | None = None) -> BatchInput:
    """items: (token_ids, num_computed, block_table, need_logits) per request; token_ids are the
    new tokens.

    Every item is checked before anything is built, and an error names the request and the value
    at fault. Pass vocab_size to reject token ids the model has no embedding for.
    """
    items = list(items)
    if not items:
        raise ValueError(f"build_batch got no items: expected at least one {ITEM}")
    block_size = check_int("block_size", block_size, min=1)
    checked = [_check_item(r, item, block_size, vocab_size) for r, item in enumerate(items)]

    input_ids, positions, slots, query_start_loc, seq_lens, tables, logits_idx = (
        [],
        [],
        [],
        [0],
        [],
        [],
        [],
    )
    for token_ids, num_computed, table, need_logits in checked:
        pos = list(range(num_computed, num_computed + len(token_ids)))
        input_ids += token_ids
        positions += pos
        slots += slot_mapping_for(table, pos, block_size)
        query_start_loc.append(query_start_loc[-1] + len(token_ids))
        seq_lens.append(
            num_computed + len(token_ids)
        )  # cached + new: the context attention reads
        tables.append(table)
        end = query_start_loc[-1]
        logits_idx += range(
            end - need_logits, end
        )  # the request's last need_logits new tokens (usually 1)

    def as_tensor(xs):  # host tensors: the runner moves them to the model's device
        return torch.tensor(xs, dtype=torch.long)

    return BatchInput(
        as_tensor(input_ids),
        as_tensor(positions),
        as_tensor(slots),
        query_start_loc,
        seq_lens,
        tables,
        as_tensor(logits_idx),
        block_size,
    )


class ModelRunner:
    """Runs a `Transformer` (its own weights and forward, no copy) over flat batches, K/V in a
    `PagedKVCache`."""

    def __init__(self, model: Transformer, kv: PagedKVCache, attention_backend: str = "torch"):
        """attention_backend: "torch" (chapter 4's PagedAttention) or "triton" (chapter 11's
        kernels)."""
        from minillm.kernels import attention_backend_class

        self.attention_backend = attention_backend
        self.backend_class = attention_backend_class(
            attention_backend
        )  # checked first: a bad name changes nothing
        cfg = model.cfg
        kv_heads = getattr(
            model, "local_kv_heads", cfg.num_key_value_heads
        )  # a tensor-parallel rank's share
        if (kv.num_kv_heads, kv.head_dim, kv.num_layers) != (
            kv_heads,
            cfg.hd,
            cfg.num_hidden_layers,
        ):
            raise ValueError(
                f"cache is {kv.num_layers} layers x {kv.num_kv_heads} KV heads x "
                f"{kv.head_dim}, model needs "
                f"{cfg.num_hidden_layers} x {kv_heads} x {cfg.hd}"
            )
        w = model.embed_tokens.weight
        if (kv.k[0].dtype, kv.device) != (w.dtype, w.device):
            raise ValueError(
                f"cache holds {kv.k[0].dtype} on {kv.device}, model runs {w.dtype} on "
                f"{w.device}: "
                "create it with PagedKVCache.for_model(model, num_blocks, block_size)"
            )
        self.model, self.kv, self.device = model, kv, w.device

    def prepare(self, batch: BatchInput) -> PagedAttention:
        """Check everything the step needs, on the host, and build its attention backend (device
        tensors, once).

        Runs before the first K/V write, so a bad batch raises and leaves the cache as it was.
        """
        if batch.block_size != self.kv.block_size:
            raise ValueError(
                f"the batch was built with block_size {batch.block_size!r}, "
                f"but the cache's blocks hold {self.kv.block_size} tokens: "
                "its slot mapping would point into other requests' blocks"
            )
        attn = self.backend_class(
            self.kv,
            batch.block_tables,
            batch.seq_lens,
            batch.query_start_loc,
            batch.slot_mapping,
        )
        ids, positions, slots = (
            host_ints(name, getattr(batch, name))
            for name in ("input_ids", "positions", "slot_mapping")
        )
        N = attn.num_tokens
        if not len(ids) == len(positions) == N:
            raise ValueError(
                f"{len(ids)} input_ids and {len(positions)} positions, "
                f"but query_start_loc ends at {N}: expected one of each per new token"
            )
        for i, (seq_len, table) in enumerate(zip(batch.seq_lens, batch.block_tables)):
            start, end = batch.query_start_loc[i], batch.query_start_loc[i + 1]
            # the new tokens are the context's last ones
            want = list(range(seq_len - (end - start), seq_len))
            if positions[start:end] != want:
                raise ValueError(
                    f"request {i} has positions {positions[start:end]}, "
                    f"but its {end - start} new tokens end a context of {seq_len}: "
                    f"expected {want[0]}..{want[-1]}"
                )
            want_slots = slot_mapping_for(table, want, self.kv.block_size)
            if slots[start:end] != want_slots:
                j = next(
                    j for j, (a, b) in enumerate(zip(slots[start:end], want_slots)) if a != b
                )
                raise ValueError(
                    f"request {i}'s token at position {want[j]} "
                    f"writes slot {slots[start + j]}, "
                    f"but its block table puts that position in slot {want_slots[j]}"
                )
        check_int_list(
            "logits_indices",
            host_ints("logits_indices", batch.logits_indices),
            min=0,
            max=N - 1,
        )
        self.model.check_token_ids(ids)
        return attn

    @torch.no_grad()
    def forward(self, batch: BatchInput) -> torch.Tensor:
        """Logits [M, vocab] for the tokens at batch.logits_indices; K/V of all N tokens are
        cached.

        After `prepare`, nothing reads a value back to the host: each array is copied to the
        device once.
        """
        attn = self.prepare(batch)
        dev = lambda t: t.to(self.device, non_blocking=True)  # noqa: E731
        return self.model(
            dev(batch.input_ids),
            dev(batch.positions),
            attn,
            logits_indices=dev(batch.logits_indices),
        )


def host_ints(name: str, x) -> list[int]:
    """A 1-D host array (CPU tensor or list) as a list of ints; a device tensor is refused,
    since reading it would stall."""
    if isinstance(x, torch.Tensor):
        if x.device.type != "cpu":
            raise ValueError(
                f"batch.{name} is on {x.device}: BatchInput holds host metadata, so build it "
                "on the CPU "
                "(build_batch does); the runner copies it to the model's device once per step"
            )
        if x.dim() != 1 or x.dtype.is_floating_point or x.dtype == torch.bool:
            raise ValueError(
                f"batch.{name} is a {x.dtype} tensor of shape {tuple(x.shape)}: expected a "
                "1-D integer tensor"
            )
        return x.tolist()
    return check_int_list(f"batch.{name}", x)
