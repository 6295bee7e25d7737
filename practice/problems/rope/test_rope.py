"""Tests for partial rotary embeddings: rope_cos_sin(positions, head_dim, partial_rotary_factor,
theta) and apply_rope(x, cos, sin), against float64 arithmetic written out here (for head sizes,
factors, thetas and positions into the thousands), against rotations worked out by hand, and,
for a factor of 1.0, against the chapter's minillm.model.rope_cos_sin and apply_rope."""

import math

import pytest
import torch
from grading import check_close, check_equal, check_names, check_raises, check_shape

from minillm.model import apply_rope as chapter_apply_rope
from minillm.model import rope_cos_sin as chapter_rope_cos_sin


def exact_tables(positions, rotary_dim, theta):
    """cos and sin [T, rotary_dim] in float64: the truth the float32 tables approximate."""
    pair = torch.arange(rotary_dim // 2, dtype=torch.float64)
    angle = torch.as_tensor(positions).double()[:, None] * theta ** (-2.0 * pair / rotary_dim)
    angle = torch.cat([angle, angle], dim=-1)
    return angle.cos(), angle.sin()


def exact_rotation(x, cos, sin):
    """x [..., head_dim] in float64 with pair (a, b) = (x[i], x[i + r/2]), i < r/2, turned to
    (a cos - b sin, b cos + a sin), r = cos.shape[-1]; the features from r on as they were."""
    r = cos.shape[-1]
    x = x.double()
    a, b, rest = x[..., : r // 2], x[..., r // 2 : r], x[..., r:]
    c, s = cos.double()[..., : r // 2], sin.double()[..., : r // 2]
    return torch.cat([a * c - b * s, b * c + a * s, rest], dim=-1)


def tables(positions, rotary_dim, theta):
    """float32 tables shaped to broadcast over the heads: [T, 1, rotary_dim]."""
    cos, sin = exact_tables(positions, rotary_dim, theta)
    return cos.float()[:, None, :], sin.float()[:, None, :]


TABLES = [  # (positions, head_dim, partial_rotary_factor, theta)
    ([0, 1, 2, 5, 17, 100], 64, 0.25, 10_000.0),  # Pythia: 16 of 64 features
    ([41], 80, 0.4, 10_000.0),  # Phi-2: 32 of 80
    ([4095, 7, 4095, 3000, 0], 96, 0.25, 10_000.0),  # GPT-NeoX-20B: 24 of 96
    ([8191, 6000, 123], 128, 0.5, 1_000_000.0),  # GLM: half the head
    ([9, 3, 1], 12, 0.4, 500.0),  # int(4.8) = 4: truncated, not rounded
    ([2500, 2501], 96, 0.3, 1_000_000.0),  # int(28.8) = 28
    ([12, 13, 14, 15], 10, 1.0, 1234.5),  # the whole head
    ([7, 3000], 8, 0.25, 10.0),  # a single pair
]


@pytest.mark.parametrize("case", range(len(TABLES)))
def test_tables_for_any_positions_head_dim_factor_and_theta(learner, case):
    """rotary_dim = int(head_dim * partial_rotary_factor) columns; pair i at position p turns by
    p * theta ** (-2i / rotary_dim), and both halves of a row share the pair's angle."""
    positions, head_dim, factor, theta = TABLES[case]
    cos, sin = learner.rope_cos_sin(torch.tensor(positions), head_dim, factor, theta)
    want_cos, want_sin = exact_tables(positions, int(head_dim * factor), theta)
    what = f"for positions {positions}, head_dim {head_dim}, factor {factor}, theta {theta:g}"
    check_close(cos, want_cos.float(), "cos " + what, atol=1e-3, dtype=torch.float32)
    check_close(sin, want_sin.float(), "sin " + what, atol=1e-3, dtype=torch.float32)


def test_pair_i_turns_at_theta_to_the_minus_two_i_over_rotary_dim(learner):
    """The frequencies divide by rotary_dim, the rotated width, not by head_dim: with head_dim 8
    and factor 0.5, pair 1 turns by 100 ** (-2/4) = 0.1 rad per position, not 100 ** (-2/8)."""
    cos, sin = learner.rope_cos_sin(torch.tensor([1]), 8, 0.5, 100.0)
    angles = torch.tensor([[1.0, 0.1, 1.0, 0.1]])
    what = "at position 1 (head_dim 8, factor 0.5, theta 100)"
    check_close(cos, angles.cos(), "cos " + what, atol=1e-6)
    check_close(sin, angles.sin(), "sin " + what, atol=1e-6)


def test_rows_follow_the_given_positions_in_any_order(learner):
    """Row t of the tables is for positions[t]: a decode step at 3000 is not at 0, and the order
    is the caller's."""
    positions = [3000, 3, 3000]
    cos, sin = learner.rope_cos_sin(torch.tensor(positions, dtype=torch.int32), 32, 0.5, 1e4)
    want_cos, want_sin = exact_tables(positions, 16, 1e4)
    what = f"for int32 positions {positions} (head_dim 32, factor 0.5)"
    check_close(cos, want_cos.float(), "cos " + what, atol=1e-3, dtype=torch.float32)
    check_close(sin, want_sin.float(), "sin " + what, atol=1e-3, dtype=torch.float32)


@pytest.mark.parametrize(
    "head_dim, factor, rotary_dim", [(74, 0.5, 37), (90, 0.3, 27), (16, 1.5, 24), (64, 0.01, 0)]
)
def test_a_rotary_dim_odd_or_outside_the_head_raises_value_error_naming_it(
    learner, head_dim, factor, rotary_dim
):
    """int(head_dim * factor) must be even (its features form pairs) and from 2 to head_dim:
    otherwise raise ValueError, and name that number so the caller sees what went wrong."""
    what = f"rope_cos_sin(positions, head_dim={head_dim}, partial_rotary_factor={factor})"
    error = check_raises(
        ValueError, learner.rope_cos_sin, torch.tensor([0, 1]), head_dim, factor, 1e4, what=what
    )
    if rotary_dim:  # "0" is in every message that names the factor
        check_names(error, rotary_dim, what)


@pytest.mark.parametrize("head_dim, factor", [(12, 0.5), (16, 0.25), (10, 1.0)])
def test_pairs_are_the_two_halves_of_the_rotated_part(learner, head_dim, factor):
    """Only x[..., :r] turns (r = cos.shape[-1]), element i with element i + r/2, as (a cos -
    b sin, b cos + a sin); x[..., r:] comes back as it was."""
    r = int(head_dim * factor)
    half = r // 2
    cos = torch.full((1, 1, r), math.cos(1.0))
    sin = torch.full((1, 1, r), math.sin(1.0))
    x = torch.zeros(1, 1, head_dim)
    x[0, 0, 0], x[0, 0, half + 1] = 1.0, 2.0  # a of pair 0, b of pair 1
    x[0, 0, r:] = torch.arange(3.0, 3.0 + head_dim - r)  # the part that passes through
    expected = x.clone()
    expected[0, 0, :r] = 0.0
    expected[0, 0, 0], expected[0, 0, half] = math.cos(1.0), math.sin(1.0)
    expected[0, 0, 1], expected[0, 0, half + 1] = -2 * math.sin(1.0), 2 * math.cos(1.0)
    check_close(
        learner.apply_rope(x, cos, sin),
        expected,
        f"apply_rope(x) by 1 rad, head_dim {head_dim}, cos/sin of width {r}, x = "
        f"{x[0, 0].tolist()}",
        atol=1e-6,
    )


LAYOUTS = [  # (x shape [..., T, heads, head_dim], positions, partial_rotary_factor, theta)
    ((5, 4, 16), [3, 4, 5, 6, 7], 0.5, 10_000.0),
    ((2, 5, 3, 32), [0, 900, 901, 2, 4000], 0.25, 1e6),
    ((1, 2, 1, 12), [7, 8], 0.5, 10.0),
    ((3, 1, 2, 80), [5000], 0.4, 10_000.0),
    ((2, 3, 2, 64), [1, 2, 3], 1.0, 10_000.0),
]


@pytest.mark.parametrize("case", range(len(LAYOUTS)))
def test_apply_rope_for_any_layout(learner, case):
    """x [..., T, heads, head_dim] turned by cos/sin [T, 1, rotary_dim] that broadcast over the
    heads and batch; the result has x's whole shape."""
    shape, positions, factor, theta = LAYOUTS[case]
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(case))
    cos, sin = tables(positions, int(shape[-1] * factor), theta)
    check_close(
        learner.apply_rope(x, cos, sin),
        exact_rotation(x, cos, sin).float(),
        f"apply_rope(x {list(shape)}, cos/sin {list(cos.shape)})",
        atol=1e-5,
        dtype=torch.float32,
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_features_past_rotary_dim_come_back_bit_for_bit(learner, dtype):
    """x[..., rotary_dim:] is not touched at all: the same values, in x's dtype."""
    x = torch.randn(4, 3, 24, generator=torch.Generator().manual_seed(5)).to(dtype)
    cos, sin = tables([0, 10, 2000, 8000], 6, 10_000.0)
    got = learner.apply_rope(x, cos, sin)
    check_shape(got, (4, 3, 24), "apply_rope(x [4, 3, 24], cos/sin [4, 1, 6])")
    check_equal(got.dtype, dtype, f"the dtype of apply_rope(x in {dtype})")
    check_equal(got[..., 6:], x[..., 6:], "apply_rope(x)[..., 6:], past the rotated features")


def test_rotation_keeps_the_length_of_each_head(learner):
    """A rotation never stretches: each pair keeps its length, so each head keeps its norm."""
    x = torch.randn(6, 2, 40, generator=torch.Generator().manual_seed(1))
    cos, sin = tables([777 * t for t in range(6)], 20, 10_000.0)
    got = learner.apply_rope(x, cos, sin)
    check_close(got.norm(dim=-1), x.norm(dim=-1), "the norm of each rotated head", atol=1e-4)
    check_close(
        got[..., :20].norm(dim=-1),
        x[..., :20].norm(dim=-1),
        "the norm of the rotated part of each head",
        atol=1e-4,
    )


def test_scores_depend_only_on_the_distance(learner):
    """q at position m and k at n meet at an angle of m - n in the rotated part, and the rest
    does not turn: shifting both by 1000 keeps every q . k."""
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(4, 1, 32, generator=g), torch.randn(4, 1, 32, generator=g)
    scores = []
    for shift in (0, 1000):
        cos, sin = learner.rope_cos_sin(torch.tensor([3, 10, 11, 40]) + shift, 32, 0.25, 1e4)
        rq = learner.apply_rope(q, cos[:, None, :], sin[:, None, :])
        rk = learner.apply_rope(k, cos[:, None, :], sin[:, None, :])
        scores.append(rq[:, 0] @ rk[:, 0].T)
    check_close(scores[1], scores[0], "q . k after shifting every position by 1000", atol=2e-3)


def test_a_factor_of_one_is_the_chapters_rope(learner):
    """partial_rotary_factor 1.0 turns the whole head: the tables and the rotation are
    minillm.model.rope_cos_sin and apply_rope."""
    positions = torch.tensor([0, 1, 77, 3000, 5])
    cos, sin = learner.rope_cos_sin(positions, 16, 1.0, 1e6)
    want_cos, want_sin = chapter_rope_cos_sin(positions, 16, 1e6)
    what = "(head_dim 16, factor 1.0) against minillm.model.rope_cos_sin"
    check_close(cos, want_cos, "cos " + what, atol=1e-3, dtype=torch.float32)
    check_close(sin, want_sin, "sin " + what, atol=1e-3, dtype=torch.float32)
    x = torch.randn(2, 5, 3, 16, generator=torch.Generator().manual_seed(4))
    c, s = want_cos[:, None, :], want_sin[:, None, :]
    check_close(
        learner.apply_rope(x, c, s),
        chapter_apply_rope(x, c, s),
        "apply_rope(x [2, 5, 3, 16]) against minillm.model.apply_rope",
        atol=1e-5,
        dtype=torch.float32,
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_result_keeps_the_input_dtype_and_shape(learner, dtype):
    """Return x's shape and dtype: compute however you like, then .to(x.dtype)."""
    x = torch.randn(3, 2, 16, generator=torch.Generator().manual_seed(3)).to(dtype)
    cos, sin = tables([0, 250, 3000], 8, 10_000.0)
    check_close(
        learner.apply_rope(x, cos, sin),
        exact_rotation(x, cos, sin),
        f"apply_rope(x [3, 2, 16] in {dtype}, cos/sin [3, 1, 8])",
        atol=3e-2,
        rtol=2e-2,
        dtype=dtype,
    )
