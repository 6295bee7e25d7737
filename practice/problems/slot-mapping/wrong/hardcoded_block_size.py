"""Wrong: uses the example's block size of 4 wherever block_size is needed.

Caught by: test_decode_position_lands_in_the_last_block.
"""


def num_blocks_needed(num_tokens: int, block_size: int) -> int:
    """Blocks for num_tokens tokens; the last block may be partly empty."""
    return (num_tokens + block_size - 1) // block_size


def slot_mapping_for(
    block_table: list[int], positions: list[int], block_size: int
) -> list[int]:
    """The slot of each position, through the request's block table (ValueError if the table is
    too short)."""
    slots = []
    for p in positions:
        index, offset = divmod(p, 4)
        if p < 0 or index >= len(block_table):
            raise ValueError(
                f"position {p} needs block {index}, but the block table has "
                f"{len(block_table)} blocks"
            )
        slots.append(block_table[index] * 4 + offset)
    return slots
