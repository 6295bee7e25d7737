"""Wrong: refuses a bitmask wider than ceil(V / 32) words, which the task allows (the words
past the vocabulary are ignored).

Caught by: test_bits_and_words_past_the_vocabulary_are_ignored.
"""

import torch


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """A copy of logits [M, V] with the forbidden tokens of the listed rows set to -inf."""
    M, V = logits.shape
    W = (V + 31) // 32
    if list(bitmask.shape) != [M, W]:
        raise ValueError(
            f"bitmask has shape {list(bitmask.shape)}, logits {list(logits.shape)}: "
            f"expected [{M}, {W}]"
        )
    shifts = torch.arange(32, dtype=torch.int32)
    bits = (bitmask[:, :, None].to(torch.int32) >> shifts) & 1  # [M, W, 32]
    allowed = bits.reshape(M, 32 * W)[:, :V].bool()  # [M, V] in token order
    listed = torch.zeros(M, 1, dtype=torch.bool)
    listed[list(rows)] = True
    keep = allowed | ~listed  # rows without a grammar keep every token
    return torch.where(keep, logits, torch.full_like(logits, float("-inf")))
