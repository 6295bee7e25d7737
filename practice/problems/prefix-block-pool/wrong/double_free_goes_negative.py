"""Wrong: does not check a free, so a double free drives an owner count below zero.

Caught by: test_freeing_a_block_nobody_holds_raises_and_changes_nothing.
"""

from collections import OrderedDict


class OutOfBlocksError(RuntimeError):
    """Not enough free blocks; nothing changed."""


class PrefixBlockPool:
    def __init__(self, num_blocks: int, block_size: int):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(
                f"num_blocks is {num_blocks} and block_size {block_size}: expected both >= 1"
            )
        self.block_size = block_size
        self.owners = [0] * num_blocks
        self.queue: OrderedDict[int, None] = OrderedDict.fromkeys(
            range(num_blocks)
        )  # front = handed out next
        self.by_name: dict[
            tuple, int
        ] = {}  # name (all tokens up to the block's end) -> cached block
        self.name_of: dict[int, tuple] = {}  # cached block -> its name

    @property
    def num_free(self) -> int:
        """Blocks nobody holds (cached or not)."""
        return len(self.queue)

    def free_queue(self) -> list[int]:
        """The blocks nobody holds, the next to be handed out first."""
        return list(self.queue)

    def ref_count(self, block: int) -> int:
        """How many requests hold the block."""
        return self.owners[block]

    def lookup(self, token_ids: list[int]) -> list[int]:
        """Cached blocks of the longest cached prefix, never the block of the last token.
        Changes nothing."""
        blocks = []
        for i in range(
            (len(token_ids) - 1) // self.block_size
        ):  # full blocks that end before the last token
            block = self.by_name.get(tuple(token_ids[: (i + 1) * self.block_size]))
            if block is None:
                break
            blocks.append(block)
        return blocks

    def allocate(self, token_ids: list[int]) -> list[int]:
        """A new request's block table: its cached prefix shared, fresh blocks after; its full
        blocks then cached."""
        hits = self.lookup(token_ids)
        need = -(-len(token_ids) // self.block_size) - len(hits)
        revived = sum(1 for b in hits if self.owners[b] == 0)
        if need + revived > len(self.queue):
            raise OutOfBlocksError(
                f"{need} new blocks and {revived} cached free ones wanted, {len(self.queue)} "
                "free"
            )
        for b in hits:
            if self.owners[b] == 0:
                del self.queue[b]  # a hit on a free block takes it back; it keeps its name
            self.owners[b] += 1
        table = list(hits)
        for _ in range(need):
            b, _ = self.queue.popitem(last=False)
            if b in self.name_of:  # its old content is about to be overwritten
                del self.by_name[self.name_of.pop(b)]
            self.owners[b] = 1
            table.append(b)
        for i in range(
            len(hits), len(token_ids) // self.block_size
        ):  # the request's new full blocks
            name = tuple(token_ids[: (i + 1) * self.block_size])
            if name not in self.by_name:
                self.by_name[name], self.name_of[table[i]] = table[i], name
        return table

    def free(self, block_table: list[int]) -> None:
        """One owner fewer per block, last block first; a block nobody holds joins the back of
        the queue, cached."""
        for b in reversed(block_table):
            self.owners[b] -= 1
            if self.owners[b] == 0:
                self.queue[b] = None
