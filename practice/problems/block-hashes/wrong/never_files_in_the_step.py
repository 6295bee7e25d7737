"""Wrong: ignores file_at and never files during the step, as if every engine filed after it.

Caught by: test_at_allocation_each_request_finds_the_ones_before_it.
"""

from minillm.prefix_caching.kv_cache_manager import (
    hash_block_tokens,
)  # hash_block_tokens(parent_hash, token_ids, extra_key) -> int


def block_hashes(
    token_ids: list[int], block_size: int, extra_key: str | None = None
) -> list[int]:
    """The chained names of the full blocks of token_ids; the extra key enters block 0 only."""
    names, parent = [], None
    for i in range(len(token_ids) // block_size):
        parent = hash_block_tokens(
            parent,
            token_ids[i * block_size : (i + 1) * block_size],
            extra_key if i == 0 else None,
        )
        names.append(parent)
    return names


def cached_prefix_length(
    token_ids: list[int], block_size: int, cached: set[int], extra_key: str | None = None
) -> int:
    """Tokens of token_ids found in the cache: full blocks from the first, never the block of
    the last token."""
    usable = (len(token_ids) - 1) // block_size  # full blocks that end before the last token
    hits = 0
    for name in block_hashes(token_ids[: usable * block_size], block_size, extra_key):
        if name not in cached:
            break
        hits += 1
    return hits * block_size


def hits_in_one_step(
    prompts: list[list[int]], block_size: int, cached: set[int], file_at: str
) -> list[int]:
    """Tokens each of a burst of requests, admitted in order in one step, finds in the cache;
    file_at is "allocation" (vLLM) or "after_step" (minillm)."""
    if file_at not in ("allocation", "after_step"):
        raise ValueError(f"file_at is {file_at!r}: expected 'allocation' or 'after_step'")
    findable, hits = set(cached), []  # a copy: the caller's set is the cache before the step
    for prompt in prompts:
        hits.append(cached_prefix_length(prompt, block_size, findable))
    return hits
