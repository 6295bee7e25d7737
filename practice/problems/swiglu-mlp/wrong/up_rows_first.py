"""Wrong: fuses up's rows first and takes the gate from the second half: consistent with
itself, but not with the layout vLLM's loader builds and SiluAndMul reads (gate first).

Caught by: test_fuse_gate_up_lays_out_the_shards_as_vllms_loader_does.
"""

import torch


def fuse_gate_up(gate_weight: torch.Tensor, up_weight: torch.Tensor) -> torch.Tensor:
    """gate_weight, up_weight [I, d] -> gate_up_weight [2*I, d]: the gate's rows, then up's."""
    return torch.cat([up_weight, gate_weight], dim=0)  # up first


def swiglu_mlp(
    x: torch.Tensor, gate_up_weight: torch.Tensor, down_weight: torch.Tensor
) -> torch.Tensor:
    """x [..., d]; gate_up_weight [2*I, d]; down_weight [d, I] -> [..., d] in x's dtype."""
    inter = gate_up_weight.shape[0] // 2
    gate_up = x @ gate_up_weight.T  # [..., 2*I]
    up, gate = gate_up[..., :inter], gate_up[..., inter:]  # up from the first half
    hidden = gate * torch.sigmoid(gate) * up
    return hidden @ down_weight.T  # [..., d]
