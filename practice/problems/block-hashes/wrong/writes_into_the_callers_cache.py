"""Wrong: files the burst's blocks into the caller's `cached` set instead of a copy.

Caught by: test_the_cache_before_the_burst_is_left_unchanged.
"""

from minillm.prefix_caching.kv_cache_manager import (
    hash_request_tokens,
)  # hash_request_tokens(token_ids, block_size) -> the chained names of the full blocks


def hits_in_steps(
    prompts: list[list[int]], block_size: int, budget: int, cached: set[int], file_at: str
) -> list[int]:
    """Tokens each request of a burst finds in the cache when admitted, first come first served,
    `budget` tokens per step; file_at is "allocation" (vLLM) or "after_step" (minillm)."""
    if file_at not in ("allocation", "after_step"):
        raise ValueError(f"file_at is {file_at!r}: expected 'allocation' or 'after_step'")
    names = [hash_request_tokens(p, block_size) for p in prompts]
    findable = cached  # a copy: the caller's set is the cache before the burst
    hits = [0] * len(prompts)
    waiting, running = list(range(len(prompts))), []  # running: [request, tokens computed]

    def file(i, end, pending):  # the full blocks of prompts[i][:end]
        (findable if file_at == "allocation" else pending).update(names[i][: end // block_size])

    while waiting or running:
        left, pending = budget, set()
        for r in running:  # running requests first, oldest first
            if left == 0:
                break
            n = min(len(prompts[r[0]]) - r[1], left)
            left, r[1] = left - n, r[1] + n
            file(r[0], r[1], pending)
        while waiting and left > 0:
            i = waiting.pop(0)
            usable = (len(prompts[i]) - 1) // block_size  # never the block of the last token
            k = 0
            while k < usable and names[i][k] in findable:
                k += 1
            hits[i] = k * block_size
            n = min(len(prompts[i]) - hits[i], left)
            left -= n
            running.append([i, hits[i] + n])
            file(i, hits[i] + n, pending)
        findable |= pending  # the step has run
        running = [r for r in running if r[1] < len(prompts[r[0]])]
    return hits
