"""Wrong: does not check the block table, so a short one fails later as an IndexError.

Caught by: test_short_block_table_raises_value_error_naming_the_request.
"""

import torch

from minillm.runner import BatchInput


def build_batch(items, block_size: int) -> BatchInput:
    """items: (token_ids, num_computed, block_table, need_logits) per request; token_ids are the
    new tokens."""
    items = [(list(ids), start, list(table), sample) for ids, start, table, sample in items]
    for i, (ids, start, table, _) in enumerate(items):  # every check before any building
        if not ids:
            raise ValueError(f"request {i} has no new tokens: expected at least one")
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
