"""Wrong: refuses bad positions without saying which one.

Caught by: test_position_beyond_the_table_raises_value_error_naming_it.
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
        index, offset = divmod(p, block_size)
        if p < 0 or index >= len(block_table):
            raise ValueError("the block table is too short")
        slots.append(block_table[index] * block_size + offset)
    return slots
