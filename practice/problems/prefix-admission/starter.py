"""Admission with prefix caching: the hit, the first chunk, and the blocks they need."""


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
    raise NotImplementedError("admit")
