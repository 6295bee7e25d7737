"""Where each token's K/V go in a paged cache: slot = block_table[p // block_size] * block_size
+ p % block_size."""


def num_blocks_needed(num_tokens: int, block_size: int) -> int:
    """Blocks for num_tokens tokens; the last block may be partly empty."""
    raise NotImplementedError("num_blocks_needed")


def slot_mapping_for(
    block_table: list[int], positions: list[int], block_size: int
) -> list[int]:
    """The slot of each position, through the request's block table (ValueError if the table is
    too short)."""
    raise NotImplementedError("slot_mapping_for")
