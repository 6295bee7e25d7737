"""Wrong: finds each token's request with searchsorted(..., right=False), so the first token
of every request after the first reads the previous request's table.

Caught by: test_one_token_decodes_each_use_their_own_table.
"""

import torch


def num_blocks_needed(num_tokens: int, block_size: int) -> int:
    """Blocks for num_tokens tokens; the last block may be partly empty."""
    return (num_tokens + block_size - 1) // block_size


def slot_mapping(
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    block_size: int,
) -> torch.Tensor:
    """The slot [N] (int64) of every token of the batch, -1 for the padding tokens after
    query_start_loc[-1]; no Python loop over tokens or requests."""
    num_tokens = positions.shape[0]
    num_real = int(query_start_loc[-1])
    if num_real > num_tokens:
        raise ValueError(
            f"query_start_loc ends at {num_real}, but positions has only {num_tokens} tokens"
        )
    counts = (query_start_loc[1:] - query_start_loc[:-1]).long()  # [B] new tokens per request
    request = torch.searchsorted(
        query_start_loc[1:].long(), torch.arange(num_real, device=positions.device)
    )  # [num_real]: the request of each real token, off by one at every request's start
    pos = positions[:num_real].long()  # [num_real]; the padding's positions are never read
    index = pos // block_size  # [num_real]: the block of each token, in its request's table
    if (pos < 0).any():
        raise ValueError(f"position {int(pos[pos < 0][0])} is negative")
    beyond = index >= block_tables.shape[1]
    if beyond.any():
        p = int(pos[beyond][0])
        raise ValueError(
            f"position {p} needs block {p // block_size}, but the block tables have "
            f"{block_tables.shape[1]} columns"
        )
    block = block_tables.long()[request, index]  # [num_real]; int64 before the product
    slots = torch.full((num_tokens,), -1, dtype=torch.long, device=positions.device)
    slots[:num_real] = block * block_size + pos % block_size
    return slots
