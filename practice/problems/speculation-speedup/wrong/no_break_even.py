"""Wrong: always speculates: returns the best k even when its predicted speedup is below 1.

Caught by: test_the_example.
"""


def expected_tokens(alpha: float, k: int) -> float:
    """1 + alpha + ... + alpha**k: the expected tokens of a verify of k proposals."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha is {alpha}: expected a probability in [0, 1]")
    if k < 0:
        raise ValueError(f"k is {k}: expected an int >= 0")
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def alpha_from_tokens_per_verify(tokens_per_verify: float, k: int) -> float:
    """The alpha whose expected tokens per verify of k proposals is tokens_per_verify."""
    if k < 1:
        raise ValueError(f"k is {k}: expected an int >= 1")
    if not 1.0 <= tokens_per_verify <= k + 1:
        raise ValueError(
            f"tokens_per_verify is {tokens_per_verify}: expected a value in [1, {k + 1}] "
            f"for k = {k}"
        )
    lo, hi = 0.0, 1.0
    for _ in range(60):  # expected_tokens grows with alpha: bisect
        mid = (lo + hi) / 2
        if expected_tokens(mid, k) < tokens_per_verify:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def best_k(alpha: float, cost_ratios: dict[int, float]) -> int:
    """The k with the largest predicted speedup, or 0 when none is above 1."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha is {alpha}: expected a probability in [0, 1]")
    if not cost_ratios:
        raise ValueError("cost_ratios is empty: expected {k: verify cost / decode cost}")
    for k, cost in cost_ratios.items():
        if k < 1:
            raise ValueError(f"cost_ratios has the key {k}: expected every k >= 1")
        if not cost > 0:
            raise ValueError(f"cost_ratios[{k}] is {cost}: expected a positive ratio")
    best, best_speedup = 0, 0.0
    for k in sorted(cost_ratios):
        speedup = expected_tokens(alpha, k) / cost_ratios[k]
        if speedup > best_speedup:
            best, best_speedup = k, speedup
    return best
