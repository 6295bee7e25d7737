"""Tests for swiglu_mlp, against minillm.model.MLP and small cases worked out by hand."""

import math

import torch

from grading import check_close
from minillm.model import MLP, ModelConfig


def random_mlp(d, inter, seed=0):
    cfg = ModelConfig(vocab_size=16, hidden_size=d, intermediate_size=inter, num_hidden_layers=1,
                      num_attention_heads=1, num_key_value_heads=1, head_dim=d)
    mlp = MLP(cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in mlp.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
    return mlp


def weights(mlp):
    return mlp.gate_proj.weight.detach(), mlp.up_proj.weight.detach(), mlp.down_proj.weight.detach()


def scalar(v):
    return torch.tensor([[float(v)]])


def test_silu_is_z_times_sigmoid_z(learner):
    """silu(z) = z * sigmoid(z): not sigmoid(z), not relu, not gelu."""
    got = learner.swiglu_mlp(scalar(2), scalar(1), scalar(1), scalar(1))
    check_close(got, scalar(2 * (1 / (1 + math.exp(-2))) * 2), "swiglu_mlp(x=2) with all weights 1", atol=1e-5)


def test_activation_goes_on_the_gate_branch(learner):
    """silu(gate(x)) * up(x): the activation is on the gate, and up stays linear."""
    got = learner.swiglu_mlp(scalar(1), scalar(2), scalar(-3), scalar(1))
    expected = 2 / (1 + math.exp(-2)) * -3  # silu(2) * (-3)
    check_close(got, scalar(expected), "swiglu_mlp(x=1) with gate 2, up -3, down 1", atol=1e-5)


def test_weights_are_laid_out_like_nn_linear(learner):
    """nn.Linear stores [out_features, in_features] and computes x @ weight.T."""
    mlp = random_mlp(3, 3, seed=1)  # square weights: the wrong layout gives wrong numbers, not an error
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        check_close(learner.swiglu_mlp(x, *weights(mlp)), mlp(x), "swiglu_mlp with 3 x 3 weights", atol=1e-5)


def test_matches_minillm_mlp(learner):
    """down(silu(gate(x)) * up(x)) on a batch of tokens, widened from 16 to 40 and back."""
    mlp = random_mlp(16, 40, seed=3)
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        check_close(learner.swiglu_mlp(x, *weights(mlp)), mlp(x), "swiglu_mlp(x [2, 5, 16])", atol=1e-5)
