"""Wrong: lets a cached block that holds the last token count as a hit.

Caught by: test_the_last_token_is_never_a_hit.
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
    usable = len(token_ids) // block_size
    hits = 0
    for name in block_hashes(token_ids[: usable * block_size], block_size, extra_key):
        if name not in cached:
            break
        hits += 1
    return hits * block_size
