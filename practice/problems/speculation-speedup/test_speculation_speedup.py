"""Tests for expected_tokens, alpha_from_tokens_per_verify and best_k: values worked out by
hand, random alphas and k against a term-by-term sum and a brute-force search, the break-even
point, and errors by message."""

import random

from grading import check_equal, check_names, check_raises, fail


def check_number(got, expected, what: str, tol: float = 1e-9) -> None:
    if not isinstance(got, (int, float)) or isinstance(got, bool):
        fail(f"{what} should be a number, got {type(got).__name__}: {got!r}")
    if not abs(got - expected) <= tol:
        fail(f"{what} is {got!r}; expected {expected!r} (within {tol:g})")


def summed(alpha, k):
    """The expectation term by term: proposal j is kept with probability alpha ** j."""
    return sum(alpha**j for j in range(k + 1))


def brute_best(alpha, costs):
    best, speed = 0, 1.0
    for k in sorted(costs):
        s = summed(alpha, k) / costs[k]
        if s > speed + 1e-12:
            best, speed = k, s
    return best


def test_the_example(learner):
    check_number(learner.expected_tokens(0.5, 2), 1.75, "expected_tokens(0.5, 2)")
    check_number(learner.expected_tokens(1.0, 4), 5.0, "expected_tokens(1.0, 4)")
    check_number(
        learner.alpha_from_tokens_per_verify(1.75, 2),
        0.5,
        "alpha_from_tokens_per_verify(1.75, 2)",
        tol=1e-6,
    )
    costs = {1: 1.3, 2: 1.5, 4: 2.0, 8: 3.4}
    check_equal(learner.best_k(0.9, costs), 4, f"best_k(0.9, {costs})")
    costs = {1: 1.4, 2: 1.5, 4: 2.0}
    check_equal(learner.best_k(0.3, costs), 0, f"best_k(0.3, {costs})")


def test_the_bonus_token_always_comes(learner):
    """alpha = 0: every first proposal is rejected, and the verify still yields one token."""
    for k in (0, 1, 3, 8):
        check_number(learner.expected_tokens(0.0, k), 1.0, f"expected_tokens(0.0, {k})")
    check_number(learner.expected_tokens(0.8, 0), 1.0, "expected_tokens(0.8, 0): no proposals")


def test_alpha_one_keeps_every_proposal(learner):
    """alpha = 1 has no geometric formula (0 / 0): the answer is k + 1."""
    for k in (1, 2, 7):
        check_number(
            learner.expected_tokens(1.0, k), float(k + 1), f"expected_tokens(1.0, {k})"
        )


def test_random_alphas_match_the_sum(learner):
    rng = random.Random(3)
    for _ in range(100):
        alpha, k = rng.random(), rng.randint(0, 12)
        check_number(
            learner.expected_tokens(alpha, k),
            summed(alpha, k),
            f"expected_tokens({alpha}, {k})",
        )


def test_alpha_round_trips_through_the_mean(learner):
    """Nonlinear for k >= 2: (tokens - 1) / k is alpha only for k = 1."""
    rng = random.Random(4)
    cases = [(0.0, 3), (1.0, 3), (0.9, 4), (0.25, 8)]
    cases += [(rng.random(), rng.randint(1, 10)) for _ in range(40)]
    for alpha, k in cases:
        mean = summed(alpha, k)
        check_number(
            learner.alpha_from_tokens_per_verify(mean, k),
            alpha,
            f"alpha_from_tokens_per_verify({mean}, {k}) (made with alpha = {alpha})",
            tol=1e-6,
        )


def test_best_k_weighs_tokens_against_cost(learner):
    """A larger k yields more tokens but costs more: the best is in between, and moves with
    alpha."""
    costs = {1: 1.3, 2: 1.5, 4: 2.0, 8: 3.4}
    for alpha, want in ((0.5, 2), (0.7, 2), (0.9, 4), (0.99, 8), (0.2, 0)):
        check_equal(learner.best_k(alpha, costs), want, f"best_k({alpha}, {costs})")
    check_equal(learner.best_k(0.5, {2: 1.0, 4: 1.0}), 4, "best_k(0.5, {2: 1.0, 4: 1.0})")


def test_a_tie_takes_the_smaller_k(learner):
    """Equal predicted speedups: the smaller k proposes less for the same gain."""
    check_equal(learner.best_k(1.0, {1: 1.0, 3: 2.0}), 1, "best_k(1.0, {1: 1.0, 3: 2.0})")


def test_random_costs_match_a_search(learner):
    rng = random.Random(5)
    for _ in range(100):
        ks = rng.sample(range(1, 11), rng.randint(1, 5))
        costs = {k: round(rng.uniform(1.0, 1.0 + 0.6 * k), 3) for k in ks}
        alpha = round(rng.random(), 3)
        check_equal(
            learner.best_k(alpha, costs), brute_best(alpha, costs), f"best_k({alpha}, {costs})"
        )


def test_bad_arguments_are_rejected_by_name(learner):
    calls = [
        ("expected_tokens", (1.5, 2), 1.5),
        ("expected_tokens", (-0.1, 2), -0.1),
        ("expected_tokens", (0.5, -1), -1),
        ("alpha_from_tokens_per_verify", (0.5, 2), 0.5),
        ("alpha_from_tokens_per_verify", (3.5, 2), 3.5),
        ("alpha_from_tokens_per_verify", (1.0, 0), 0),
        ("best_k", (0.5, {}), "empty"),
        ("best_k", (0.5, {0: 1.0}), 0),
        ("best_k", (0.5, {2: -1.0}), -1.0),
        ("best_k", (1.2, {2: 1.5}), 1.2),
    ]
    for name, args, value in calls:
        e = check_raises(ValueError, getattr(learner, name), *args, what=f"{name}{args}")
        if value == "empty":
            check_equal("empty" in str(e), True, f"whether {str(e)!r} says the dict is empty")
        else:
            check_names(e, value, f"the message of {name}{args}")
