"""Tests for rope_cos_sin and apply_rope: against float64 arithmetic over many head sizes,
thetas and
positions (into the thousands), and against rotations worked out by hand."""

import math

import pytest
import torch
from grading import check_close, check_equal

from minillm.model import apply_rope, rope_cos_sin


def exact_tables(positions, head_dim, theta):
    """cos and sin in float64: the truth the float32 tables approximate."""
    pair = torch.arange(head_dim // 2, dtype=torch.float64)
    angle = torch.as_tensor(positions).double()[:, None] * theta ** (-2.0 * pair / head_dim)
    angle = torch.cat([angle, angle], dim=-1)
    return angle.cos(), angle.sin()


def exact_rotation(x, cos, sin):
    x, cos, sin = x.double(), cos.double(), sin.double()
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


TABLES = [  # (positions, head_dim, theta)
    ([0, 1, 2, 5, 17, 100], 16, 1_000_000.0),
    ([41], 8, 10_000.0),
    ([4095, 7, 4095, 3000, 0], 64, 10_000.0),
    ([8191, 6000, 123], 128, 1_000_000.0),
    ([9, 3, 1], 6, 10.0),
    ([2500, 2501], 2, 500.0),
    ([12, 13, 14, 15], 10, 1234.5),
]


@pytest.mark.parametrize("case", range(len(TABLES)))
def test_tables_for_any_positions_head_dim_and_theta(learner, case):
    """Pair i at position p turns by p * theta ** (-2i / head_dim); both halves of a row share
    the pair's angle."""
    positions, head_dim, theta = TABLES[case]
    cos, sin = learner.rope_cos_sin(torch.tensor(positions), head_dim, theta)
    want_cos, want_sin = exact_tables(positions, head_dim, theta)
    what = f"for positions {positions}, head_dim {head_dim}, theta {theta:g}"
    check_close(cos, want_cos.float(), "cos " + what, atol=1e-3, dtype=torch.float32)
    check_close(sin, want_sin.float(), "sin " + what, atol=1e-3, dtype=torch.float32)


def test_pair_i_turns_at_theta_to_the_minus_two_i_over_d(learner):
    """Pair i turns by position * theta ** (-2 * i / head_dim): the exponent has a factor 2."""
    cos, sin = learner.rope_cos_sin(torch.tensor([1]), 4, 100.0)
    angles = torch.tensor([[1.0, 0.1, 1.0, 0.1]])  # 100**0 and 100**(-2/4)
    check_close(cos, angles.cos(), "cos at position 1 (head_dim 4, theta 100)", atol=1e-6)
    check_close(sin, angles.sin(), "sin at position 1 (head_dim 4, theta 100)", atol=1e-6)


def test_rows_follow_the_given_positions_in_any_order(learner):
    """Row t of the tables is for positions[t]: a decode step at 3000 is not at 0, and the order
    is the caller's."""
    cos, sin = learner.rope_cos_sin(
        torch.tensor([3000, 3, 3000], dtype=torch.int32), 8, 10_000.0
    )
    want_cos, want_sin = exact_tables([3000, 3, 3000], 8, 10_000.0)
    check_close(
        cos,
        want_cos.float(),
        "cos for int32 positions [3000, 3, 3000]",
        atol=1e-3,
        dtype=torch.float32,
    )
    check_close(
        sin,
        want_sin.float(),
        "sin for int32 positions [3000, 3, 3000]",
        atol=1e-3,
        dtype=torch.float32,
    )


@pytest.mark.parametrize("head_dim", [8, 10])
def test_pairs_are_the_two_halves_of_a_head(learner, head_dim):
    """Element i pairs with element i + head_dim/2, and (a, b) becomes (a cos - b sin, b cos + a
    sin)."""
    half = head_dim // 2
    cos, sin = (
        torch.full((1, 1, head_dim), math.cos(1.0)),
        torch.full((1, 1, head_dim), math.sin(1.0)),
    )
    x = torch.zeros(1, 1, head_dim)
    x[0, 0, 0], x[0, 0, half + 1] = 1.0, 2.0  # a of pair 0, b of pair 1
    expected = torch.zeros(1, 1, head_dim)
    expected[0, 0, 0], expected[0, 0, half] = math.cos(1.0), math.sin(1.0)
    expected[0, 0, 1], expected[0, 0, half + 1] = -2 * math.sin(1.0), 2 * math.cos(1.0)
    check_close(
        learner.apply_rope(x, cos, sin),
        expected,
        f"apply_rope(e0 + 2 * e{half + 1}) by 1 rad, head_dim {head_dim}",
        atol=1e-6,
    )


LAYOUTS = [
    ((5, 4, 16), [3, 4, 5, 6, 7], 10_000.0),
    ((2, 5, 3, 32), [0, 900, 901, 2, 4000], 1e6),
    ((1, 2, 1, 6), [7, 8], 10.0),
    ((3, 1, 2, 64), [5000], 1e6),
]


@pytest.mark.parametrize("case", range(len(LAYOUTS)))
def test_apply_rope_for_any_layout(learner, case):
    """x [..., T, heads, head_dim] rotated by cos/sin [T, 1, head_dim] that broadcast over the
    heads and batch."""
    shape, positions, theta = LAYOUTS[case]
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(case))
    cos, sin = rope_cos_sin(torch.tensor(positions), shape[-1], theta)
    got = learner.apply_rope(x, cos[:, None, :], sin[:, None, :])
    check_close(
        got,
        exact_rotation(x, cos[:, None, :], sin[:, None, :]).float(),
        f"apply_rope(x {list(shape)})",
        atol=1e-5,
        dtype=torch.float32,
    )


def test_rotation_keeps_the_length_of_each_head(learner):
    """A rotation never stretches: each pair keeps its length, so each head keeps its norm."""
    x = torch.randn(6, 2, 12, generator=torch.Generator().manual_seed(1))
    cos, sin = rope_cos_sin(torch.arange(6) * 777, 12, 10_000.0)
    got = learner.apply_rope(x, cos[:, None, :], sin[:, None, :])
    check_close(got.norm(dim=-1), x.norm(dim=-1), "the norm of each rotated head", atol=1e-4)


def test_scores_depend_only_on_the_distance(learner):
    """q at position m and k at n meet at an angle of m - n: shifting both by 1000 keeps every q
    . k."""
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(4, 1, 16, generator=g), torch.randn(4, 1, 16, generator=g)
    scores = []
    for shift in (0, 1000):
        cos, sin = learner.rope_cos_sin(torch.tensor([3, 10, 11, 40]) + shift, 16, 10_000.0)
        rq = learner.apply_rope(q, cos[:, None, :], sin[:, None, :])
        rk = learner.apply_rope(k, cos[:, None, :], sin[:, None, :])
        scores.append(rq[:, 0] @ rk[:, 0].T)
    check_close(scores[1], scores[0], "q . k after shifting every position by 1000", atol=2e-3)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_result_keeps_the_input_dtype(learner, dtype):
    """Return x's dtype: compute however you like, then .to(x.dtype)."""
    x = torch.randn(3, 2, 8, generator=torch.Generator().manual_seed(3)).to(dtype)
    cos, sin = rope_cos_sin(torch.tensor([0, 250, 3000]), 8, 10_000.0)
    got = learner.apply_rope(x, cos[:, None, :], sin[:, None, :])
    check_close(
        got,
        apply_rope(x, cos[:, None, :], sin[:, None, :]),
        f"apply_rope(x in {dtype})",
        atol=3e-2,
        rtol=2e-2,
        dtype=dtype,
    )
    check_equal(tuple(got.shape), (3, 2, 8), "the shape of apply_rope(x [3, 2, 8])")
