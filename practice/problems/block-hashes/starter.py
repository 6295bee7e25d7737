"""When a burst's blocks become findable: hits under a token budget, filed at allocation or
after the step."""

from minillm.prefix_caching.kv_cache_manager import (
    hash_request_tokens,
)  # hash_request_tokens(token_ids, block_size) -> the chained names of the full blocks


def hits_in_steps(
    prompts: list[list[int]], block_size: int, budget: int, cached: set[int], file_at: str
) -> list[int]:
    """Tokens each request of a burst finds in the cache when admitted, first come first served,
    `budget` tokens per step; file_at is "allocation" (vLLM) or "after_step" (minillm)."""
    raise NotImplementedError("hits_in_steps")
