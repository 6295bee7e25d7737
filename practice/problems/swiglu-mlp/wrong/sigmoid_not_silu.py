"""Wrong: uses sigmoid(gate) as the gate, not silu(gate) = gate * sigmoid(gate).

Caught by: test_silu_is_z_times_sigmoid_z.
"""

import torch


def swiglu_mlp(
    x: torch.Tensor,
    gate_weight: torch.Tensor,
    up_weight: torch.Tensor,
    down_weight: torch.Tensor,
) -> torch.Tensor:
    """x [..., d]; gate_weight, up_weight [inter, d]; down_weight [d, inter] -> [..., d]."""
    gate = x @ gate_weight.T  # [..., inter]
    up = x @ up_weight.T
    hidden = torch.sigmoid(gate) * up  # silu on the gate only, then the elementwise gate
    return hidden @ down_weight.T  # [..., d]
