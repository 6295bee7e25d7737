"""Wrong: unpacks the whole bitmask as one run of bits and cuts it into rows of V, as if the
padding came once at the end; each row has its own padding bits, so every row after the first
reads its neighbour's bits.

Caught by: test_random_masks_and_vocabularies.
"""

import torch


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """A copy of logits [M, V] with the forbidden tokens of the listed rows set to -inf."""
    M, V = logits.shape
    W = (V + 31) // 32
    if bitmask.shape[0] != M or bitmask.shape[1] < W:
        raise ValueError(
            f"bitmask has shape {list(bitmask.shape)}, logits {list(logits.shape)}: "
            f"expected [{M}, >= {W}]"
        )
    shifts = torch.arange(32, dtype=torch.int32)
    bits = (bitmask.to(torch.int32).flatten()[:, None] >> shifts) & 1  # [M * W, 32]
    allowed = bits.flatten()[: M * V].reshape(M, V).bool()  # rows cut at V, not at 32 * W
    listed = torch.zeros(M, 1, dtype=torch.bool)
    listed[list(rows)] = True
    keep = allowed | ~listed  # rows without a grammar keep every token
    return torch.where(keep, logits, torch.full_like(logits, float("-inf")))
