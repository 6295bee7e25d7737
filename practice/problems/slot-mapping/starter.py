"""The slot mapping of a whole flat batch, in tensor operations: slot =
block_tables[request, p // block_size] * block_size + p % block_size, and -1 for padding."""

import torch


def num_blocks_needed(num_tokens: int, block_size: int) -> int:
    """Blocks for num_tokens tokens; the last block may be partly empty."""
    raise NotImplementedError("num_blocks_needed")


def slot_mapping(
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    block_size: int,
) -> torch.Tensor:
    """The slot [N] (int64) of every token of the batch, -1 for the padding tokens after
    query_start_loc[-1]; no Python loop over tokens or requests."""
    raise NotImplementedError("slot_mapping")
