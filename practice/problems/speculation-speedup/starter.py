"""When speculation pays: alpha from a run's acceptance rate, the best k with a draft's cost."""


def expected_tokens(alpha: float, k: int) -> float:
    """1 + alpha + ... + alpha**k: the expected tokens of a verify of k proposals (given)."""
    return float(k + 1) if alpha == 1.0 else (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def alpha_from_acceptance(acceptance: float, k: int) -> float:
    """The alpha whose acceptance rate (E(alpha, k) - 1) / k is `acceptance`."""
    raise NotImplementedError("alpha_from_acceptance")


def best_k(alpha: float, cost_ratios: dict[int, float], draft_cost: float) -> int:
    """The k with the largest E / (c(k) + k * draft_cost), or 0 when none is above 1."""
    raise NotImplementedError("best_k")
