"""Wrong: returns the example's answers (three requests, block 4, budget 64) for any burst.

Caught by: test_random_bursts_match_a_token_level_replay.
"""


def hits_in_steps(
    prompts: list[list[int]], block_size: int, budget: int, cached: set[int], file_at: str
) -> list[int]:
    """Tokens each request of a burst finds in the cache when admitted, first come first served,
    `budget` tokens per step; file_at is "allocation" (vLLM) or "after_step" (minillm)."""
    if file_at not in ("allocation", "after_step"):
        raise ValueError(f"file_at is {file_at!r}: expected 'allocation' or 'after_step'")
    first = [0] + [12] * (len(prompts) - 1)
    return first if file_at == "allocation" else [0] * len(prompts)
