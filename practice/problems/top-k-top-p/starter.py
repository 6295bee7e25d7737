"""Top-k / top-p filtering of logits and seeded sampling from what is left."""

import torch


def top_k_top_p_filter(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """[B, V] -> a new [B, V] tensor with the cut tokens set to -inf (top-k first, then
    top-p)."""
    raise NotImplementedError("top_k_top_p_filter")


def sample(
    logits: torch.Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
    generator: torch.Generator,
) -> torch.Tensor:
    """One token id per row ([B], torch.long): greedy at temperature 0, else scale, filter,
    multinomial."""
    raise NotImplementedError("sample")
