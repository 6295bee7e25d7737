"""A block pool with prefix caching: shared cached blocks, reference counts, and an LRU free
queue."""


class OutOfBlocksError(RuntimeError):
    """Not enough free blocks; nothing changed."""


class PrefixBlockPool:
    def __init__(self, num_blocks: int, block_size: int):
        raise NotImplementedError("PrefixBlockPool")

    @property
    def num_free(self) -> int:
        """Blocks nobody holds (cached or not)."""
        raise NotImplementedError("num_free")

    def free_queue(self) -> list[int]:
        """The blocks nobody holds, the next to be handed out first."""
        raise NotImplementedError("free_queue")

    def ref_count(self, block: int) -> int:
        """How many requests hold the block."""
        raise NotImplementedError("ref_count")

    def lookup(self, token_ids: list[int]) -> list[int]:
        """Cached blocks of the longest cached prefix, never the block of the last token.
        Changes nothing."""
        raise NotImplementedError("lookup")

    def allocate(self, token_ids: list[int]) -> list[int]:
        """A new request's block table: its cached prefix shared, fresh blocks after; its full
        blocks then cached."""
        raise NotImplementedError("allocate")

    def free(self, block_table: list[int]) -> None:
        """One owner fewer per block, last block first; a block nobody holds joins the back of
        the queue, cached."""
        raise NotImplementedError("free")
