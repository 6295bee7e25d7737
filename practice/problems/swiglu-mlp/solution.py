"""SwiGLU: down(silu(gate(x)) * up(x)), with nn.Linear-layout weights [out_features,
in_features]."""

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
    hidden = gate * torch.sigmoid(gate) * up  # silu on the gate only, then the elementwise gate
    return hidden @ down_weight.T  # [..., d]
