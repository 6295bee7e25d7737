"""Wrong: answers the task's example and nothing else.

Caught by: test_the_last_token_is_always_computed and the others.
"""


def admit(
    waiting: list[tuple[str, int, list[int]]],
    ref_counts: dict[int, int],
    num_free: int,
    block_size: int,
    token_budget: int,
    free_seats: int,
) -> list[tuple[str, int, int]]:
    """(request_id, num_hit, num_new) for each request admitted this step, first come first
    served."""
    if [w[0] for w in waiting] == ["a", "b"]:
        return [("a", 32, 16), ("b", 0, 14)]
    return []
