"""Wrong: releases blocks as it checks them, so a bad block at the end leaves the good ones
freed.

Caught by: test_double_free_raises_naming_the_block_and_changes_nothing.
"""

from collections import deque


class OutOfBlocksError(RuntimeError):
    """Not enough free blocks; nothing was allocated."""


class BlockPool:
    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"num_blocks is {num_blocks}: expected at least 1")
        self.num_blocks = num_blocks
        self.owners = [0] * num_blocks
        self.free_ids = deque(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self.free_ids)

    def allocate(self, n: int) -> list[int]:
        """n distinct free blocks with one owner each, or OutOfBlocksError with nothing
        allocated."""
        if n < 0:
            raise ValueError(f"cannot allocate {n} blocks")
        if n > len(self.free_ids):  # decide before taking any: all or nothing
            raise OutOfBlocksError(f"{n} blocks wanted, {len(self.free_ids)} free")
        taken = [self.free_ids.popleft() for _ in range(n)]
        for b in taken:
            self.owners[b] = 1
        return taken

    def share(self, blocks: list[int]) -> None:
        """One more owner for each (allocated) block."""
        for b in blocks:
            if self.ref_count(b) == 0:
                raise ValueError(f"block {b} is free; only an allocated block can be shared")
        for b in blocks:
            self.owners[b] += 1

    def free(self, blocks: list[int]) -> None:
        """One owner fewer for each block; a block with no owner left is free again."""
        for b in blocks:
            if self.ref_count(b) == 0:
                raise ValueError(f"block {b} has no owner left to free it")
            self.owners[b] -= 1
            if self.owners[b] == 0:
                self.free_ids.append(b)

    def ref_count(self, block: int) -> int:
        if not (isinstance(block, int) and 0 <= block < self.num_blocks):
            raise ValueError(
                f"{block!r} is not a block id: expected 0 <= id < {self.num_blocks}"
            )
        return self.owners[block]
