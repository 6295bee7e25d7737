"""Wrong: returns the example's answer for any input of its shape.

Caught by: test_random_masks_and_vocabularies.
"""

import torch


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """A copy of logits [M, V] with the forbidden tokens of the listed rows set to -inf."""
    out = logits.clone()
    if out.shape == (2, 40):
        keep = torch.zeros(40, dtype=torch.bool)
        keep[[0, 2, 35]] = True
        out[0, ~keep] = float("-inf")
        return out
    if out.shape[1] == 64:
        out[0, [t for t in range(64) if t not in (31, 63)]] = float("-inf")
        return out
    if out.shape == (1, 4):
        out[0, [1, 3]] = float("-inf")
    return out
