"""The verification step: greedy accepts the longest matching prefix plus the target's own
token, and
rejection sampling emits tokens distributed exactly as the target's (a chi-square test at
significance 0.001 with fixed seeds), while a sampler that redraws from p instead of the
residual fails the same test."""

import pytest
import torch

from minillm.sampling import SamplingParams, sample
from minillm.spec_decode.rejection_sampler import greedy_verify, rejection_sample, target_probs

# Chi-square critical values at significance 0.001 (upper tail), from the standard table.
CHI2_CRIT_001 = {3: 16.266, 15: 37.697}
N = 8_000  # trials; each expected cell count below is at least N * 0.05 * 0.1 = 40

P = torch.tensor(
    [
        [0.50, 0.30, 0.15, 0.05],  # the target after the context
        [0.10, 0.60, 0.10, 0.20],  # after the first proposal
        [0.25, 0.25, 0.25, 0.25],
    ],
    dtype=torch.float64,
)  # after the second (the bonus row)
Q = torch.tensor([[0.10, 0.20, 0.30, 0.40], [0.40, 0.10, 0.40, 0.10]], dtype=torch.float64)


def chi2(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def first_two_tokens(residual: bool, q=Q) -> torch.Tensor:
    """Counts [4, 4] of the first two emitted tokens over N seeded verifies of 2 drafts drawn
    from q.
    When the verify emits only one token, the second comes from the next step's plain draw
    from P[1]."""
    counts = torch.zeros(4, 4, dtype=torch.float64)
    gen = torch.Generator().manual_seed(1234)
    for trial in range(N):
        draft = (
            [int(torch.multinomial(q[j], 1, generator=gen)) for j in range(2)]
            if q is not None
            else [3, 2]
        )
        out = rejection_sample(P, draft, q, seed=trial, step=0, residual=residual)
        if len(out) == 1:
            out.append(int(torch.multinomial(P[1], 1, generator=gen)))
        counts[out[0], out[1]] += 1
    return counts


def test_rejection_sampling_reproduces_the_target_distribution():
    counts = first_two_tokens(residual=True)
    target = P[0][:, None] * P[1][None, :]  # [4, 4]: the target's own two-token distribution
    stat = chi2(counts.flatten(), target.flatten())
    print(
        f"chi-square {stat:.1f} over 15 degrees of freedom (critical {CHI2_CRIT_001[15]} at "
        "0.001)"
    )
    assert stat < CHI2_CRIT_001[15]


def test_a_sampler_without_the_residual_fails_the_same_test():
    counts = first_two_tokens(residual=False)
    target = P[0][:, None] * P[1][None, :]
    assert chi2(counts.flatten(), target.flatten()) > CHI2_CRIT_001[15]


def first_token_and_bonus(bonus_row: torch.Tensor) -> torch.Tensor:
    """Counts [4, 4] of the first two tokens over N seeded verifies of k = 1 draft drawn from
    Q[0]. When the draft is accepted the second token is the bonus, drawn from bonus_row (P[1]
    when right); when it is rejected, the second comes from the next step's plain draw from
    P[1]."""
    counts = torch.zeros(4, 4, dtype=torch.float64)
    gen = torch.Generator().manual_seed(99)
    p = torch.stack([P[0], bonus_row])  # [k + 1 = 2, 4]
    for trial in range(N):
        draft = [int(torch.multinomial(Q[0], 1, generator=gen))]
        out = rejection_sample(p, draft, Q[:1], seed=trial, step=0)
        if len(out) == 1:
            out.append(int(torch.multinomial(P[1], 1, generator=gen)))
        counts[out[0], out[1]] += 1
    return counts


def test_the_bonus_token_after_an_accepted_proposal_is_drawn_from_the_target():
    # sum_x min(P[0], Q[0]) = 0.5: half the verifies accept their one proposal and add a bonus
    target = P[0][:, None] * P[1][None, :]  # [4, 4]
    stat = chi2(first_token_and_bonus(P[1]).flatten(), target.flatten())
    assert stat < CHI2_CRIT_001[15]
    # the control: a bonus drawn from the wrong row (uniform) fails the same test
    wrong = first_token_and_bonus(P[2])
    assert chi2(wrong.flatten(), target.flatten()) > CHI2_CRIT_001[15]


def test_a_proposal_without_probabilities_is_a_one_hot_q():
    counts = first_two_tokens(residual=True, q=None)  # n-gram style: always proposes [3, 2]
    stat = chi2(counts.sum(dim=1), P[0])
    assert stat < CHI2_CRIT_001[3]


def test_the_draws_are_seeded():
    a = [rejection_sample(P, [1, 2], Q, seed=s, step=4) for s in range(50)]
    b = [rejection_sample(P, [1, 2], Q, seed=s, step=4) for s in range(50)]
    assert a == b and len({tuple(x) for x in a}) > 3


@pytest.mark.parametrize(
    "sp",
    [
        SamplingParams(temperature=0.7, top_k=10, top_p=0.9),
        SamplingParams(temperature=1.0, min_p=0.3),
        SamplingParams(temperature=1.3, min_p=0.1, top_k=20, top_p=0.95),
    ],
)
def test_target_probs_are_what_sample_draws_from(sp):
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0)) * 3
    probs = target_probs(logits, sp)
    for i in range(3):
        drawn = {sample(logits[i : i + 1], [sp], [s], [0])[0] for s in range(200)}
        assert drawn == set(torch.nonzero(probs[i]).flatten().tolist())
    assert torch.allclose(probs.sum(-1), torch.ones(3))


def test_rejection_sample_checks_shapes():
    with pytest.raises(ValueError, match="expected k\\+1 = 3 rows"):
        rejection_sample(P[:2], [1, 2], Q, seed=0, step=0)


@pytest.mark.parametrize(
    "argmax, draft, n, want",
    [
        ([[4, 5, 6]], [[4, 5]], [2], [[4, 5, 6]]),  # all accepted: the bonus follows
        (
            [[4, 5, 6]],
            [[4, 9]],
            [2],
            [[4, 5]],
        ),  # the second proposal rejected: the target's token replaces it
        ([[4, 5, 6]], [[7, 5]], [2], [[4]]),  # a later match after a mismatch does not count
        (
            [[4, 5, 6], [1, 2, 3]],
            [[4, 5], [1, 0]],
            [1, 1],
            [[4, 5], [1, 2]],
        ),  # padded rows: only n real proposals
        (
            [[8]],
            torch.zeros(1, 0, dtype=torch.long),
            [0],
            [[8]],
        ),  # no proposals: a plain decode
    ],
)
def test_greedy_verify_batched(argmax, draft, n, want):
    draft = draft if isinstance(draft, torch.Tensor) else torch.tensor(draft)
    assert greedy_verify(torch.tensor(argmax), draft, n) == want
