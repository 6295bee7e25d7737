"""Wrong: computes in float32 and returns float32 for half-precision inputs.

Caught by: test_half_precision_stays_half_precision.
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
    gate_up = x.float() @ gate_up_weight.float().T  # [..., 2*I]
    gate, up = gate_up[..., :inter], gate_up[..., inter:]
    hidden = gate * torch.sigmoid(gate) * up
    return hidden @ down_weight.float().T  # float32 whatever x's dtype
