"""Wrong: fuses the two weights side by side along dim 1 ([I, 2*d], the input dimension)
instead of along the output dimension, and reads its own layout back consistently.

Caught by: test_fuse_gate_up_lays_out_the_shards_as_vllms_loader_does.
"""

import torch


def fuse_gate_up(gate_weight: torch.Tensor, up_weight: torch.Tensor) -> torch.Tensor:
    """gate_weight, up_weight [I, d] -> gate_up_weight [2*I, d], as vLLM's loader fuses them."""
    return torch.cat([gate_weight, up_weight], dim=1)  # [I, 2*d]: along the input dimension


def swiglu_mlp(
    x: torch.Tensor, gate_up_weight: torch.Tensor, down_weight: torch.Tensor
) -> torch.Tensor:
    """x [..., d]; gate_up_weight [2*I, d]; down_weight [d, I] -> [..., d] in x's dtype."""
    d = x.shape[-1]
    gate = x @ gate_up_weight[:, :d].T  # reads the [I, 2*d] layout it built
    up = x @ gate_up_weight[:, d:].T
    hidden = gate * torch.sigmoid(gate) * up
    return hidden @ down_weight.T  # [..., d]
