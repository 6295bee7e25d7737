"""Apply a packed int32 token bitmask (bit t % 32 of word t // 32) to rows of logits."""

import torch


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """A copy of logits [M, V] with the forbidden tokens of the listed rows set to -inf."""
    raise NotImplementedError("apply_bitmask")
