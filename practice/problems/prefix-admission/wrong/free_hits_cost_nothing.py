"""Wrong: a hit on a block in the free queue is taken as free of charge.

Caught by: test_a_hit_on_a_free_block_costs_a_free_block.
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
    held = {
        b for b, n in ref_counts.items() if n > 0
    }  # blocks someone holds (grows as we admit)
    admitted = []
    for request_id, num_tokens, cached_blocks in waiting:
        if free_seats == 0 or token_budget == 0:
            break
        hit = cached_blocks[: (num_tokens - 1) // block_size]  # the last token is computed
        num_hit = len(hit) * block_size
        num_new = min(num_tokens - num_hit, token_budget)
        new_blocks = -(-(num_hit + num_new) // block_size) - len(hit)
        revived = []  # they leave the free queue
        if new_blocks + len(revived) > num_free:
            break  # first come, first served: nobody overtakes the head of the queue
        num_free -= new_blocks + len(revived)
        held.update(hit)
        token_budget -= num_new
        free_seats -= 1
        admitted.append((request_id, num_hit, num_new))
    return admitted
