"""Tests for alpha_from_acceptance and best_k: values worked out by hand, random alphas round
tripped through the acceptance rate, random costs against a brute-force search, the draft's cost
counted once per proposal, and errors by message."""

import random

from grading import check_equal, check_names, check_raises, fail


def check_number(got, expected, what: str, tol: float = 1e-9) -> None:
    if not isinstance(got, (int, float)) or isinstance(got, bool):
        fail(f"{what} should be a number, got {type(got).__name__}: {got!r}")
    if not abs(got - expected) <= tol:
        fail(f"{what} is {got!r}; expected {expected!r} (within {tol:g})")


def summed(alpha, k):
    """E(alpha, k) term by term: proposal j is kept with probability alpha**j."""
    return sum(alpha**j for j in range(k + 1))


def brute_best(alpha, costs, draft_cost):
    best, speed = 0, 1.0
    for k in sorted(costs):
        s = summed(alpha, k) / (costs[k] + k * draft_cost)
        if s > speed + 1e-12:
            best, speed = k, s
    return best


def test_the_example(learner):
    check_number(
        learner.alpha_from_acceptance(0.5, 1), 0.5, "alpha_from_acceptance(0.5, 1)", 1e-6
    )
    acc = (summed(0.8, 4) - 1) / 4
    check_number(
        learner.alpha_from_acceptance(acc, 4), 0.8, f"alpha_from_acceptance({acc}, 4)", 1e-6
    )
    costs = {1: 1.3, 2: 1.5, 4: 2.0, 8: 3.4}
    check_equal(learner.best_k(0.9, costs, 0.0), 4, f"best_k(0.9, {costs}, 0.0)")
    check_equal(learner.best_k(1.0, {4: 1.22}, 1.0), 0, "best_k(1.0, {4: 1.22}, 1.0)")


def test_the_acceptance_rate_is_not_alpha(learner):
    """For k >= 2 the acceptance rate sits below alpha: every proposal after the first rejection
    counts as rejected."""
    rng = random.Random(4)
    cases = [(0.0, 3), (1.0, 3), (0.9, 4), (0.25, 8), (0.8, 8)]
    cases += [(rng.random(), rng.randint(1, 10)) for _ in range(40)]
    for alpha, k in cases:
        acc = (summed(alpha, k) - 1) / k
        check_number(
            learner.alpha_from_acceptance(acc, k),
            alpha,
            f"alpha_from_acceptance({acc}, {k}) (made with alpha = {alpha})",
            tol=1e-6,
        )


def test_a_free_proposer_weighs_tokens_against_the_verify(learner):
    costs = {1: 1.3, 2: 1.5, 4: 2.0, 8: 3.4}
    for alpha, want in ((0.5, 2), (0.7, 2), (0.9, 4), (0.99, 8), (0.2, 0)):
        check_equal(learner.best_k(alpha, costs, 0.0), want, f"best_k({alpha}, {costs}, 0.0)")


def test_each_proposal_pays_the_draft(learner):
    """k proposals cost k draft forwards: the draft's cost pushes the best k down, then to 0."""
    costs = {1: 1.1, 2: 1.15, 4: 1.22, 8: 1.51}
    for d, want in ((0.0, 8), (0.2, 4), (0.6, 2), (1.0, 0)):
        check_equal(learner.best_k(0.9, costs, d), want, f"best_k(0.9, {costs}, {d})")


def test_a_tie_takes_the_smaller_k(learner):
    check_equal(
        learner.best_k(1.0, {1: 1.0, 3: 2.0}, 0.0), 1, "best_k(1.0, {1: 1.0, 3: 2.0}, 0.0)"
    )


def test_random_costs_match_a_search(learner):
    rng = random.Random(5)
    for _ in range(200):
        ks = rng.sample(range(1, 11), rng.randint(1, 5))
        costs = {k: round(rng.uniform(1.0, 1.0 + 0.6 * k), 3) for k in ks}
        alpha, d = round(rng.random(), 3), round(rng.choice([0.0, rng.uniform(0, 0.5)]), 3)
        check_equal(
            learner.best_k(alpha, costs, d),
            brute_best(alpha, costs, d),
            f"best_k({alpha}, {costs}, {d})",
        )


def test_bad_arguments_are_rejected_by_name(learner):
    calls = [
        ("alpha_from_acceptance", (1.5, 2), 1.5),
        ("alpha_from_acceptance", (-0.1, 2), -0.1),
        ("alpha_from_acceptance", (0.5, 0), 0),
        ("best_k", (0.5, {}, 0.0), "empty"),
        ("best_k", (0.5, {0: 1.0}, 0.0), 0),
        ("best_k", (0.5, {2: -1.0}, 0.0), -1.0),
        ("best_k", (1.2, {2: 1.5}, 0.0), 1.2),
        ("best_k", (0.5, {2: 1.5}, -0.25), -0.25),
    ]
    for name, args, value in calls:
        e = check_raises(ValueError, getattr(learner, name), *args, what=f"{name}{args}")
        if value == "empty":
            check_equal("empty" in str(e), True, f"whether {str(e)!r} says the dict is empty")
        else:
            check_names(e, value, f"the message of {name}{args}")
