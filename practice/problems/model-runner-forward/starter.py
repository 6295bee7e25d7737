"""ModelRunner.forward as a function: one flat batch of prefills, decodes and chunks through the model."""

import torch

from minillm.model import apply_rope, rope_cos_sin  # noqa: F401  (you will need them)
from minillm.paged import paged_attention  # noqa: F401


@torch.no_grad()
def runner_forward(model, kv, batch) -> torch.Tensor:
    """model: minillm Transformer; kv: PagedKVCache; batch: BatchInput -> logits [M, vocab] at batch.logits_indices."""
    raise NotImplementedError("runner_forward")
