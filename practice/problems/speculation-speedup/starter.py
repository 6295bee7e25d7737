"""When speculation pays: expected tokens per verify, alpha from a measured mean, the best k."""


def expected_tokens(alpha: float, k: int) -> float:
    """1 + alpha + ... + alpha**k: the expected tokens of a verify of k proposals."""
    raise NotImplementedError("expected_tokens")


def alpha_from_tokens_per_verify(tokens_per_verify: float, k: int) -> float:
    """The alpha whose expected tokens per verify of k proposals is tokens_per_verify."""
    raise NotImplementedError("alpha_from_tokens_per_verify")


def best_k(alpha: float, cost_ratios: dict[int, float]) -> int:
    """The k with the largest predicted speedup, or 0 when none is above 1."""
    raise NotImplementedError("best_k")
