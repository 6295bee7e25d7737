"""Wrong: returns the example's answers, and the ones worked out by hand, for any input.

Caught by: test_random_alphas_match_the_sum.
"""


def expected_tokens(alpha: float, k: int) -> float:
    """1 + alpha + ... + alpha**k: the expected tokens of a verify of k proposals."""
    return {(0.5, 2): 1.75, (1.0, 4): 5.0}.get((alpha, k), 1.0)


def alpha_from_tokens_per_verify(tokens_per_verify: float, k: int) -> float:
    """The alpha whose expected tokens per verify of k proposals is tokens_per_verify."""
    return 0.5


def best_k(alpha: float, cost_ratios: dict[int, float]) -> int:
    """The k with the largest predicted speedup, or 0 when none is above 1."""
    return 4 if alpha == 0.9 else 0
