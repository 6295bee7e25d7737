"""Tests for rope_cos_sin and apply_rope, against minillm.model and rotations worked out by hand."""

import math

import torch

from grading import check_close
from minillm.model import apply_rope, rope_cos_sin


def test_cos_sin_match_minillm(learner):
    """One angle per pair, position * theta**(-2i/head_dim), written twice: torch.cat([angles, angles], -1)."""
    positions = torch.tensor([0, 1, 2, 5, 17, 100])
    cos, sin = learner.rope_cos_sin(positions, 16, 1_000_000.0)
    ref_cos, ref_sin = rope_cos_sin(positions, 16, 1_000_000.0)
    check_close(cos, ref_cos, "cos for positions [0, 1, 2, 5, 17, 100], head_dim 16", atol=1e-4)
    check_close(sin, ref_sin, "sin for positions [0, 1, 2, 5, 17, 100], head_dim 16", atol=1e-4)


def test_pair_i_turns_at_theta_to_the_minus_two_i_over_d(learner):
    """Pair i turns by position * theta ** (-2 * i / head_dim): the exponent has a factor 2."""
    cos, sin = learner.rope_cos_sin(torch.tensor([1]), 4, 100.0)
    angles = torch.tensor([[1.0, 0.1, 1.0, 0.1]])  # 100**0 and 100**(-2/4)
    check_close(cos, angles.cos(), "cos at position 1 (head_dim 4, theta 100)", atol=1e-5)
    check_close(sin, angles.sin(), "sin at position 1 (head_dim 4, theta 100)", atol=1e-5)


def test_tables_use_the_given_positions(learner):
    """Row t of the tables is for positions[t] (a decode step is at position 41, not 0)."""
    cos, sin = learner.rope_cos_sin(torch.tensor([41, 7]), 8, 10_000.0)
    ref_cos, ref_sin = rope_cos_sin(torch.tensor([41, 7]), 8, 10_000.0)
    check_close(cos, ref_cos, "cos for positions [41, 7]", atol=1e-4)
    check_close(sin, ref_sin, "sin for positions [41, 7]", atol=1e-4)


def test_pairs_are_the_two_halves_of_a_head(learner):
    """Element i pairs with element i + head_dim/2, and (a, b) becomes (a cos - b sin, b cos + a sin)."""
    cos = torch.full((1, 1, 8), math.cos(1.0))
    sin = torch.full((1, 1, 8), math.sin(1.0))
    x = torch.zeros(1, 1, 8)
    x[0, 0, 0], x[0, 0, 5] = 1.0, 2.0  # a in pair 0, b in pair 1
    expected = torch.zeros(1, 1, 8)
    expected[0, 0, 0], expected[0, 0, 4] = math.cos(1.0), math.sin(1.0)  # pair (0, 4): a = 1, b = 0
    expected[0, 0, 1], expected[0, 0, 5] = -2 * math.sin(1.0), 2 * math.cos(1.0)  # pair (1, 5): a = 0, b = 2
    check_close(learner.apply_rope(x, cos, sin), expected, "apply_rope(e0 + 2 * e5) by 1 rad", atol=1e-5)


def test_apply_rope_matches_minillm(learner):
    """x * cos + rotate_half(x) * sin, with rotate_half(x) = cat([-x2, x1]); cos and sin broadcast over heads."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 4, 16, generator=g)  # [B, T, heads, head_dim]
    cos, sin = rope_cos_sin(torch.arange(3, 8), 16, 10_000.0)
    got = learner.apply_rope(x, cos[:, None, :], sin[:, None, :])
    check_close(got, apply_rope(x, cos[:, None, :], sin[:, None, :]), "apply_rope(x [2, 5, 4, 16])", atol=1e-5)


def test_rotation_keeps_the_length_of_each_head(learner):
    """A rotation never stretches: each pair keeps its length, so each head keeps its norm."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 2, 8, generator=g)
    cos, sin = rope_cos_sin(torch.arange(6) * 13, 8, 10_000.0)
    got = learner.apply_rope(x, cos[:, None, :], sin[:, None, :])
    check_close(got.norm(dim=-1), x.norm(dim=-1), "the norm of each rotated head", atol=1e-4)


def test_result_keeps_the_input_dtype(learner):
    """Return x's dtype: compute however you like, then .to(x.dtype)."""
    x = torch.randn(3, 2, 8, generator=torch.Generator().manual_seed(2)).bfloat16()
    cos, sin = rope_cos_sin(torch.arange(3), 8, 10_000.0)
    got = learner.apply_rope(x, cos[:, None, :], sin[:, None, :])
    check_close(got, apply_rope(x, cos[:, None, :], sin[:, None, :]), "apply_rope(x in bfloat16)", atol=3e-2,
                rtol=2e-2, dtype=torch.bfloat16)
