"""Hands out fixed-size KV blocks by id, all or nothing, and counts each block's owners."""


class OutOfBlocksError(RuntimeError):
    """Not enough free blocks; nothing was allocated."""


class BlockPool:
    def __init__(self, num_blocks: int):
        # set self.num_blocks, self.ref_counts (one owner count per block) and
        # self.free_blocks (the free ids, in the order allocate hands them out)
        raise NotImplementedError("BlockPool.__init__")

    @property
    def num_free(self) -> int:
        raise NotImplementedError("BlockPool.num_free")

    @property
    def num_allocated(self) -> int:
        raise NotImplementedError("BlockPool.num_allocated")

    def allocate(self, n: int) -> list[int]:
        """n distinct free blocks with one owner each, or OutOfBlocksError with nothing
        allocated."""
        raise NotImplementedError("BlockPool.allocate")

    def share(self, blocks: list[int]) -> None:
        """One more owner for each (allocated) block."""
        raise NotImplementedError("BlockPool.share")

    def free(self, blocks: list[int]) -> None:
        """One owner fewer for each block; a block with no owner left is free again."""
        raise NotImplementedError("BlockPool.free")
