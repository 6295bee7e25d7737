"""Wrong: uses sigmoid(gate) as the gate, not silu(gate) = gate * sigmoid(gate).

Caught by: test_silu_is_z_times_sigmoid_z.
"""

import torch


def fuse_gate_up(gate_weight: torch.Tensor, up_weight: torch.Tensor) -> torch.Tensor:
    """gate_weight, up_weight [I, d] -> gate_up_weight [2*I, d]: the gate's rows, then up's."""
    return torch.cat([gate_weight, up_weight], dim=0)  # shard 0 = gate, shard 1 = up


def swiglu_mlp(
    x: torch.Tensor, gate_up_weight: torch.Tensor, down_weight: torch.Tensor
) -> torch.Tensor:
    """x [..., d]; gate_up_weight [2*I, d]; down_weight [d, I] -> [..., d] in x's dtype."""
    inter = gate_up_weight.shape[0] // 2
    gate_up = x @ gate_up_weight.T  # [..., 2*I]: both projections in one product
    gate, up = gate_up[..., :inter], gate_up[..., inter:]  # [..., I] each, gate first
    hidden = torch.sigmoid(gate) * up
    return hidden @ down_weight.T  # [..., d]
