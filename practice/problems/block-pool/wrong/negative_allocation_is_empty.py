"""Wrong: answers [] for allocate(-2) instead of raising ValueError.

Caught by: test_negative_allocation_raises_value_error_naming_it.
"""

from collections import Counter, deque


class OutOfBlocksError(RuntimeError):
    """Not enough free blocks; nothing was allocated."""


class BlockPool:
    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"num_blocks is {num_blocks}: expected at least 1")
        self.num_blocks = num_blocks
        self.ref_counts = [0] * num_blocks  # owners of each block
        # first in, first out: allocate takes from the front, free appends at the back
        self.free_blocks = deque(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self.free_blocks)

    @property
    def num_allocated(self) -> int:
        return self.num_blocks - self.num_free

    def allocate(self, n: int) -> list[int]:
        """n distinct free blocks with one owner each, or OutOfBlocksError with nothing
        allocated."""
        if n < 0:
            return []
        if n > len(self.free_blocks):  # decide before taking any: all or nothing
            raise OutOfBlocksError(f"{n} blocks wanted, {len(self.free_blocks)} free")
        taken = [self.free_blocks.popleft() for _ in range(n)]
        for b in taken:
            self.ref_counts[b] = 1
        return taken

    def share(self, blocks: list[int]) -> None:
        """One more owner for each (allocated) block."""
        for b in blocks:
            if self._owners(b) == 0:
                raise ValueError(f"block {b} is free; only an allocated block can be shared")
        for b in blocks:
            self.ref_counts[b] += 1

    def free(self, blocks: list[int]) -> None:
        """One owner fewer for each block; a block with no owner left is free again."""
        for b, times in Counter(blocks).items():
            if times > self._owners(b):
                raise ValueError(
                    f"block {b} has {self.ref_counts[b]} owner(s) but would be freed {times} "
                    "time(s)"
                )
        for b in blocks:
            self.ref_counts[b] -= 1
            if self.ref_counts[b] == 0:
                self.free_blocks.append(b)

    def _owners(self, block: int) -> int:
        """The block's owner count, once its id is checked."""
        if not (isinstance(block, int) and 0 <= block < self.num_blocks):
            raise ValueError(
                f"{block!r} is not a block id: expected 0 <= id < {self.num_blocks}"
            )
        return self.ref_counts[block]
