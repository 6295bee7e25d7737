"""Wrong: checks each request as it builds it: the error comes, but only after the earlier
requests were built.

Caught by: test_short_block_table_raises_value_error_naming_the_request.
"""

import torch

from minillm.runner import BatchInput


def build_batch(items, block_size: int) -> BatchInput:
    """items: (token_ids, num_computed, block_table, need_logits) per request; token_ids are the
    new tokens."""
    items = [(list(ids), start, list(table), sample) for ids, start, table, sample in items]
    for i, (ids, start, table, _) in enumerate(items[:1]):
        if not ids:
            raise ValueError(f"request {i} has no new tokens: expected at least one")
        last = start + len(ids) - 1
        if last // block_size >= len(table):
            raise ValueError(
                f"request {i}: position {last} needs block {last // block_size}, "
                f"but its table has {len(table)} blocks"
            )
    input_ids, positions, slots, starts, seq_lens, rows = [], [], [], [0], [], []
    for ids, start, table, sample in items:
        for p in range(start, start + len(ids)):
            positions.append(p)
            slots.append(table[p // block_size] * block_size + p % block_size)
        input_ids += ids
        starts.append(starts[-1] + len(ids))
        seq_lens.append(start + len(ids))
        if sample:
            rows.append(starts[-1] - 1)
    long = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731  (empty lists too)
    return BatchInput(
        long(input_ids),
        long(positions),
        long(slots),
        starts,
        seq_lens,
        [table for _, _, table, _ in items],
        long(rows),
        block_size,
    )
