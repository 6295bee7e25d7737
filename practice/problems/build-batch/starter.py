"""build_batch: one step's requests -> the flat BatchInput that ModelRunner.forward consumes."""

import torch

from minillm.runner import BatchInput


def build_batch(items, block_size: int) -> BatchInput:
    """items: (token_ids, num_computed, block_table, need_logits) per request; token_ids are the
    new tokens."""
    raise NotImplementedError("build_batch")
