"""Chained block hashes, and the cached prefix of a request under the last-token rule."""

from minillm.prefix_caching.kv_cache_manager import (
    hash_block_tokens,
)  # hash_block_tokens(parent_hash, token_ids, extra_key) -> int


def block_hashes(
    token_ids: list[int], block_size: int, extra_key: str | None = None
) -> list[int]:
    """The chained names of the full blocks of token_ids; the extra key enters block 0 only."""
    raise NotImplementedError("block_hashes")


def cached_prefix_length(
    token_ids: list[int], block_size: int, cached: set[int], extra_key: str | None = None
) -> int:
    """Tokens of token_ids found in the cache: full blocks from the first, never the block of
    the last token."""
    raise NotImplementedError("cached_prefix_length")


def hits_in_one_step(
    prompts: list[list[int]], block_size: int, cached: set[int], file_at: str
) -> list[int]:
    """Tokens each of a burst of requests, admitted in order in one step, finds in the cache;
    file_at is "allocation" (vLLM) or "after_step" (minillm)."""
    raise NotImplementedError("hits_in_one_step")
