"""Wrong: splits the product with chunk(2, dim=1): right for the flat [tokens, 2*I] batch
vLLM passes, wrong (or a shape error) for any other number of leading dimensions.

Caught by: test_matches_minillm_for_any_size_and_batch.
"""

import torch


def fuse_gate_up(gate_weight: torch.Tensor, up_weight: torch.Tensor) -> torch.Tensor:
    """gate_weight, up_weight [I, d] -> gate_up_weight [2*I, d]: the gate's rows, then up's."""
    return torch.cat([gate_weight, up_weight], dim=0)  # shard 0 = gate, shard 1 = up


def swiglu_mlp(
    x: torch.Tensor, gate_up_weight: torch.Tensor, down_weight: torch.Tensor
) -> torch.Tensor:
    """x [..., d]; gate_up_weight [2*I, d]; down_weight [d, I] -> [..., d] in x's dtype."""
    gate_up = x @ gate_up_weight.T  # [..., 2*I]
    gate, up = gate_up.chunk(2, dim=1)  # dim 1 is the last only when x is [tokens, d]
    hidden = gate * torch.sigmoid(gate) * up
    return hidden @ down_weight.T  # [..., d]
