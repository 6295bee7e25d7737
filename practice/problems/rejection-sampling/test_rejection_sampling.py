"""Tests for rejection_sample: hand cases that are certain, random shapes against the reference
draw for
draw, the emitted distribution equal to the target's (a chi-square test at significance
0.001), arguments unchanged, and shape errors."""

import random

import torch
from grading import check_equal, check_raises, global_random_state

CHI2_CRIT_001_DOF3 = (
    16.266  # chi-square critical value, 3 degrees of freedom, significance 0.001
)


def reference(p, q, draft, seed):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for j, x in enumerate(draft):
        u = torch.rand((), generator=gen, dtype=torch.float64)
        if u * q[j, x] < p[j, x]:
            out.append(int(x))
            continue
        out.append(int(torch.multinomial((p[j] - q[j]).clamp(min=0), 1, generator=gen)))
        return out
    return out + [int(torch.multinomial(p[len(draft)], 1, generator=gen))]


def rows(gen, n, V, sparse=False):
    x = torch.rand(n, V, generator=gen, dtype=torch.float64) ** 3
    if sparse:
        x = x * (torch.rand(n, V, generator=gen) < 0.5)
        x[:, 0] += 1e-3  # every row keeps some mass
    return x / x.sum(-1, keepdim=True)


def test_an_impossible_proposal_is_always_rejected(learner):
    """p gives the proposal no chance: it is rejected, and the replacement comes from the
    residual."""
    p = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.2, 0.6]], dtype=torch.float64)
    q = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    got = {tuple(learner.rejection_sample(p, q, [2], seed)) for seed in range(30)}
    check_equal(got, {(0,), (1,)}, "the outputs over 30 seeds of the example")


def test_a_proposal_the_target_likes_more_is_always_accepted(learner):
    """p(x) >= q(x) means min(1, p/q) = 1: every proposal is kept and the bonus is drawn from
    p[k]."""
    p = torch.tensor([[0.1, 0.9], [0.2, 0.8], [0.0, 1.0]], dtype=torch.float64)
    q = torch.tensor([[0.5, 0.5], [0.3, 0.7]], dtype=torch.float64)
    got = {tuple(learner.rejection_sample(p, q, [1, 1], seed)) for seed in range(30)}
    check_equal(
        got,
        {(1, 1, 1)},
        "the outputs over 30 seeds when p favours both proposals (and p[2] is one-hot)",
    )


def test_the_draws_follow_the_prescribed_order(learner):
    """Random k (0 to 6), vocabularies and seeds: the same tokens as the reference, draw for
    draw."""
    rng = random.Random(4)
    gen = torch.Generator().manual_seed(4)
    for case in range(80):
        k, V = rng.randint(0, 6), rng.choice([2, 5, 33, 500])
        p, q = rows(gen, k + 1, V, sparse=case % 2 == 0), rows(gen, k, V, sparse=case % 3 == 0)
        draft = [int(torch.multinomial(q[j], 1, generator=gen)) for j in range(k)]
        seed = rng.randrange(1 << 30)
        check_equal(
            learner.rejection_sample(p, q, draft, seed),
            reference(p, q, draft, seed),
            f"case {case}: k={k}, vocabulary {V}, seed {seed}",
        )


def test_the_global_random_state_is_left_alone(learner):
    """Draw only from the seeded generator of the call: torch.manual_seed, or torch.rand without
    generator=, changes the random stream of everything else the engine samples."""
    rng = random.Random(9)
    gen = torch.Generator().manual_seed(9)
    for case in range(12):
        k, V = rng.randint(0, 4), rng.choice([2, 7, 50])
        p, q = rows(gen, k + 1, V), rows(gen, k, V)
        draft = [int(torch.multinomial(q[j], 1, generator=gen)) for j in range(k)]
        seed = rng.randrange(1 << 30)
        before = global_random_state(learner)
        learner.rejection_sample(p, q, draft, seed)
        check_equal(
            global_random_state(learner) == before,
            True,
            f"case {case}: whether rejection_sample(k={k}, vocabulary {V}, seed {seed}) "
            "left the global random state of its process (torch's default generator, "
            "Python's random) as it was",
        )


def test_the_emitted_token_is_distributed_as_the_target(learner):
    """Over 1,000 seeded trials with proposals drawn from q, the first emitted token follows
    p[0]."""
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
    q = torch.tensor([[0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    counts = [0] * 4
    for trial in range(1000):
        x = int(torch.multinomial(q[0], 1, generator=gen))
        counts[learner.rejection_sample(p, q, [x], trial)[0]] += 1
    stat = sum((c - 1000 * float(e)) ** 2 / (1000 * float(e)) for c, e in zip(counts, p[0]))
    check_equal(
        stat < CHI2_CRIT_001_DOF3,
        True,
        f"whether the counts {counts} fit p[0] = {p[0].tolist()} "
        f"(chi-square {stat:.1f}, critical {CHI2_CRIT_001_DOF3})",
    )


def test_the_arguments_are_left_unchanged(learner):
    """The engine keeps p and q for its metrics: the step only reads them."""
    p = torch.tensor([[0.6, 0.4], [0.5, 0.5]], dtype=torch.float64)
    q = torch.tensor([[0.9, 0.1]], dtype=torch.float64)
    draft = [0]
    before = (p.clone(), q.clone(), list(draft))
    for seed in range(10):
        learner.rejection_sample(p, q, draft, seed)
    check_equal((p, q, draft), before, "p, q and draft after rejection_sample")


def test_shapes_that_do_not_fit_are_rejected(learner):
    """p needs k + 1 rows, q k rows of the same width."""
    p, q = (
        torch.full((2, 3), 1 / 3, dtype=torch.float64),
        torch.full((1, 3), 1 / 3, dtype=torch.float64),
    )
    e = check_raises(
        ValueError,
        learner.rejection_sample,
        p,
        q,
        [0, 1],
        0,
        what="rejection_sample with 2 rows of p for 2 proposals",
    )
    check_equal(
        "(2, 3)" in str(e), True, f"whether the message {str(e)!r} names p's shape (2, 3)"
    )
    check_raises(
        ValueError,
        learner.rejection_sample,
        p,
        torch.full((1, 4), 0.25, dtype=torch.float64),
        [0],
        0,
        what="rejection_sample with q 4 wide and p 3 wide",
    )
