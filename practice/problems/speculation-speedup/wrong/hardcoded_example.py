"""Wrong: returns the example's answers for any input.

Caught by: test_the_acceptance_rate_is_not_alpha.
"""


def expected_tokens(alpha: float, k: int) -> float:
    """1 + alpha + ... + alpha**k: the expected tokens of a verify of k proposals (given)."""
    return float(k + 1) if alpha == 1.0 else (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def alpha_from_acceptance(acceptance: float, k: int) -> float:
    """The alpha whose acceptance rate (E(alpha, k) - 1) / k is `acceptance`."""
    return 0.5 if k == 1 else 0.8


def best_k(alpha: float, cost_ratios: dict[int, float], draft_cost: float) -> int:
    """The k with the largest E / (c(k) + k * draft_cost), or 0 when none is above 1."""
    return 4 if alpha == 0.9 else 0
