"""Wrong: two requests hitting the same free block both pay for taking it out of the queue.

Caught by: test_a_block_revived_once_is_paid_once.
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
        revived = [b for b in hit if b not in held]  # they leave the free queue
        if new_blocks + len(revived) > num_free:
            break  # first come, first served: nobody overtakes the head of the queue
        num_free -= new_blocks + len(revived)
        token_budget -= num_new
        free_seats -= 1
        admitted.append((request_id, num_hit, num_new))
    return admitted
