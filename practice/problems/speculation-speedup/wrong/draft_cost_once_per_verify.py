"""Wrong: charges the draft once per verify instead of once per proposal.

Caught by: test_each_proposal_pays_the_draft.
"""


def expected_tokens(alpha: float, k: int) -> float:
    """1 + alpha + ... + alpha**k: the expected tokens of a verify of k proposals (given)."""
    return float(k + 1) if alpha == 1.0 else (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def alpha_from_acceptance(acceptance: float, k: int) -> float:
    """The alpha whose acceptance rate (E(alpha, k) - 1) / k is `acceptance`."""
    if k < 1:
        raise ValueError(f"k is {k}: expected an int >= 1")
    if not 0.0 <= acceptance <= 1.0:
        raise ValueError(f"acceptance is {acceptance}: expected a fraction in [0, 1]")
    target = 1.0 + k * acceptance  # the tokens per verify that acceptance rate means
    lo, hi = 0.0, 1.0
    for _ in range(60):  # expected_tokens grows with alpha: bisect
        mid = (lo + hi) / 2
        if expected_tokens(mid, k) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def best_k(alpha: float, cost_ratios: dict[int, float], draft_cost: float) -> int:
    """The k with the largest E / (c(k) + k * draft_cost), or 0 when none is above 1."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha is {alpha}: expected a probability in [0, 1]")
    if draft_cost < 0:
        raise ValueError(f"draft_cost is {draft_cost}: expected a cost >= 0, in decodes")
    if not cost_ratios:
        raise ValueError("cost_ratios is empty: expected {k: verify cost / decode cost}")
    for k, cost in cost_ratios.items():
        if k < 1:
            raise ValueError(f"cost_ratios has the key {k}: expected every k >= 1")
        if not cost > 0:
            raise ValueError(f"cost_ratios[{k}] is {cost}: expected a positive ratio")
    best, best_speedup = 0, 1.0
    for k in sorted(cost_ratios):  # ascending: a tie keeps the smaller k
        speedup = expected_tokens(alpha, k) / (cost_ratios[k] + draft_cost)
        if speedup > best_speedup:
            best, best_speedup = k, speedup
    return best
