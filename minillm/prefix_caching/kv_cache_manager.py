"""prefix_caching/kv_cache_manager.py — prefix caching: requests that share a prompt prefix
share its KV blocks.

A full block's K/V depend only on its tokens and on every token before it. So a full block is
named by a chained digest, `hash_block_tokens(parent's digest, its token ids, extra key)`: equal
digests mean equal prefixes, and the digest of block i can be computed from the tokens alone,
before any lookup. The `KVCacheManager` files every block that becomes full under its digest. A
new request walks its own digests block by block; the blocks found are its cached prefix: their
reference counts go up, its block table starts with them and its first chunk starts after them.
Two rules keep this exact:

- only full blocks are filed (a partial block is still being written), and the lookup always
  leaves at least the last prompt token to compute, since sampling needs its logits;
- a digest only finds candidates: a hit is trusted after comparing the block's own token ids,
  extra key and parent block, so a digest collision costs a miss, never a wrong answer.

A freed block keeps its K/V and its digest. It waits in the `FreeBlockQueue` in LRU order (a
request frees its blocks last first, so a prefix's tail is evicted before its head) until the
pool hands it out again; only then is it forgotten. A hit on a waiting block takes it back out
of the queue.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from minillm.checking import check_int
from minillm.paged import BlockPool, num_blocks_for

ROOT = -1  # the "parent" of a request's first block


def hash_block_tokens(
    parent_hash: int | None, token_ids: Iterable[int], extra_key: str | None = None
) -> int:
    """The chained digest of one full block: sha256 of (parent's digest, the block's token ids,
    an extra key).

    A 64-bit int. sha256 rather than Python's hash(): the same tokens give the same digest in
    every process.
    """
    ids = list(token_ids)
    h = hashlib.sha256()
    h.update(b"root" if parent_hash is None else struct.pack("<Q", parent_hash))
    # the length first: no two token lists share bytes
    h.update(struct.pack(f"<I{len(ids)}q", len(ids), *ids))
    if extra_key is not None:
        h.update(b"extra:" + str(extra_key).encode())
    return int.from_bytes(h.digest()[:8], "little")


def hash_request_tokens(
    token_ids: list[int],
    block_size: int,
    extra_key: str | None = None,
    hash_fn: Callable = hash_block_tokens,
) -> list[int]:
    """The digests of every full block of token_ids, in order (a partial last block has none).

    The extra key (a `cache_salt`) enters the first block's digest only; through the chain it
    changes all the others.
    """
    block_size = check_int("block_size", block_size, min=1)
    digests, parent = [], None
    for i in range(len(token_ids) // block_size):
        parent = hash_fn(
            parent,
            token_ids[i * block_size : (i + 1) * block_size],
            extra_key if i == 0 else None,
        )
        digests.append(parent)
    return digests


class FreeBlockQueue:
    """Free block ids in eviction order: the front is handed out (and forgotten) first.

    The `collections.deque` of chapter 4's `BlockPool`, plus `remove` of any block in O(1),
    which a cache hit on a free block needs. Ordered like vLLM's `FreeKVCacheBlockQueue`: blocks
    join at the back.
    """

    def __init__(self, blocks: Iterable[int] = ()):
        self._blocks: OrderedDict[int, None] = OrderedDict.fromkeys(blocks)

    def popleft(self) -> int:
        return self._blocks.popitem(last=False)[0]

    def append(self, block: int) -> None:
        if block in self._blocks:
            raise ValueError(f"block {block} is already in the free queue")
        self._blocks[block] = None

    def remove(self, block: int) -> None:
        del self._blocks[block]

    def __contains__(self, block) -> bool:
        return block in self._blocks

    def __len__(self) -> int:
        return len(self._blocks)

    def __iter__(self):
        return iter(self._blocks)


@dataclass
class PrefixCacheStats:
    """Counters of one step, or of an engine's whole life (vLLM's PrefixCacheStats, plus
    computed tokens)."""

    num_queries: int = (
        0  # admissions that looked the cache up (a preempted request looks up again)
    )
    num_query_tokens: int = 0  # tokens those requests had when they looked
    num_hit_tokens: int = 0  # of which were found in the cache, so never computed
    num_computed_tokens: int = (
        0  # tokens run through the model (prefill chunks, recomputes, decodes)
    )

    @property
    def hit_rate(self) -> float:
        return self.num_hit_tokens / self.num_query_tokens if self.num_query_tokens else 0.0

    def admit(self, seq, num_hit: int) -> None:
        """Count one admission that found num_hit of seq's tokens cached (the first one is seq's
        num_cached_tokens)."""
        self.num_queries += 1
        self.num_query_tokens += seq.num_tokens
        self.num_hit_tokens += num_hit
        if seq.num_cached_tokens is None:
            seq.num_cached_tokens = num_hit

    def add(self, other: PrefixCacheStats) -> None:
        for name in (
            "num_queries",
            "num_query_tokens",
            "num_hit_tokens",
            "num_computed_tokens",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))


class KVCacheManager:
    """A request's KV blocks: allocation, prefix-cache hits, filing full blocks, and freeing.

    Owns `pool` (chapter 4's BlockPool: ids and reference counts), whose free list becomes a
    FreeBlockQueue. With enable_caching=False nothing is filed or found: it is then exactly
    chapter 6's allocation. The scheduler talks to this object only; requests are `Sequence`s
    (request_id, tokens(), num_tokens, num_computed, block_table, cache_salt).
    """

    def __init__(
        self,
        pool: BlockPool,
        block_size: int,
        enable_caching: bool = False,
        hash_fn: Callable = hash_block_tokens,
    ):
        if not isinstance(pool, BlockPool):
            raise TypeError(
                f"pool is a {type(pool).__name__}: expected a minillm.paged.BlockPool"
            )
        if not isinstance(pool.free_blocks, FreeBlockQueue):
            pool.free_blocks = FreeBlockQueue(pool.free_blocks)  # same blocks, same order
        self.pool, self.block_size = pool, check_int("block_size", block_size, min=1)
        self.enable_caching, self.hash_fn = bool(enable_caching), hash_fn
        n = pool.num_blocks
        # the digest a filed block is found under
        self.block_hash: list[int | None] = [None] * n
        # (parent block, its epoch, token ids, extra key), checked on a hit
        self.block_key: list[tuple | None] = [None] * n
        # +1 whenever a block is forgotten: a child filed under its old content stops matching
        self.epoch = [0] * n
        # digest -> filed blocks (more than one only if digests collide)
        self.cached: dict[int, list[int]] = {}
        # request -> (filed block, epoch, digest) per full block
        self.chains: dict[str, list[tuple[int, int, int]]] = {}

    # ---- lookup
    #   ---------------------------------------------------------------------------------------
    def find(self, digest: int, key: tuple) -> int | None:
        """The filed block with this digest whose tokens, extra key and parent are exactly
        `key`, or None."""
        return next((b for b in self.cached.get(digest, ()) if self.block_key[b] == key), None)

    def lookup(self, token_ids: list[int], extra_key: str | None = None) -> list[int]:
        """Filed blocks holding the longest cached prefix of token_ids, in order (full blocks
        only). Holds nothing."""
        blocks, parent, parent_epoch, digest = [], ROOT, 0, None
        for i in range(len(token_ids) // self.block_size):
            tokens = tuple(token_ids[i * self.block_size : (i + 1) * self.block_size])
            extra = extra_key if i == 0 else None
            digest = self.hash_fn(digest, tokens, extra)
            block = self.find(digest, (parent, parent_epoch, tokens, extra))
            if block is None:
                break
            blocks.append(block)
            parent, parent_epoch = block, self.epoch[block]
        return blocks

    def get_computed_blocks(self, seq) -> tuple[list[int], int]:
        """(blocks, num_tokens) of seq's cached prefix, leaving at least its last token to
        compute.

        A prompt of exactly k full blocks, all cached, gets k - 1 of them: its last token must
        run to give logits, and it would land in the last block, which may be shared, so that
        whole block is computed again.
        """
        if not self.enable_caching or seq.block_table:
            return [], 0
        if getattr(seq.params, "prompt_logprobs", None) is not None:
            # as vLLM: a cached prefix has K/V but no logits, and these rows need logits
            return [], 0
        # full blocks that end before the last token
        usable = (seq.num_tokens - 1) // self.block_size
        blocks = self.lookup(
            seq.tokens(0, usable * self.block_size), getattr(seq, "cache_salt", None)
        )
        return blocks, len(blocks) * self.block_size

    # ---- allocation
    #   -----------------------------------------------------------------------------------
    def can_allocate(self, seq, num_tokens: int, computed_blocks: list[int] = ()) -> bool:
        new = (
            num_blocks_for(num_tokens, self.block_size)
            - len(seq.block_table)
            - len(computed_blocks)
        )
        # hits that leave the free queue
        revived = sum(1 for b in computed_blocks if self.pool.ref_counts[b] == 0)
        return max(new, 0) + revived <= self.pool.num_free

    def allocate_slots(self, seq, num_tokens: int, computed_blocks: list[int] = ()) -> bool:
        """Grow seq's block table to hold num_tokens tokens, starting with computed_blocks (a
        cache hit).

        Returns False, changing nothing, when the pool is short.
        """
        if computed_blocks and seq.block_table:
            raise ValueError(
                f"request {seq.request_id!r} already has blocks: a cache hit only starts a "
                "block table"
            )
        if not self.can_allocate(seq, num_tokens, computed_blocks):
            return False
        # share the hit blocks; a free one leaves the queue, keeping its K/V
        for b in computed_blocks:
            if self.pool.ref_counts[b] == 0:
                self.pool.free_blocks.remove(b)
                self.pool.ref_counts[b] = 1
            else:
                self.pool.share([b])
        if computed_blocks:
            self.chains[seq.request_id] = [
                (b, self.epoch[b], self.block_hash[b]) for b in computed_blocks
            ]
            seq.block_table = list(computed_blocks)
        need = num_blocks_for(num_tokens, self.block_size) - len(seq.block_table)
        if need > 0:
            new = self.pool.allocate(need)
            for b in new:
                # the front of the queue may be a cached block: its old content is gone now
                self.forget(b)
            seq.block_table.extend(new)
        return True

    def forget(self, block: int) -> None:
        """Drop a block from the cache (it is about to be overwritten)."""
        digest = self.block_hash[block]
        if digest is None:
            return
        self.cached[digest].remove(block)
        if not self.cached[digest]:
            del self.cached[digest]
        self.block_hash[block] = self.block_key[block] = None
        self.epoch[block] += 1

    # ---- filing and freeing
    #   ---------------------------------------------------------------------------
    def cache_full_blocks(self, seq) -> None:
        """File seq's blocks that are now full of computed tokens (prompt or output) under their
        digests.

        If an identical block is already filed (two requests computed the same prefix at once),
        seq's copy stays unfiled and the filed one stands for it in seq's chain, so seq's later
        blocks chain onto it. If that filed copy is evicted, seq's own copies are filed in its
        place, but only on a call that finds a new full block; until then the prefix is missed.
        """
        if not self.enable_caching:
            return
        chain = self.chains.setdefault(seq.request_id, [])
        if seq.num_computed // self.block_size <= len(chain):
            # no block became full since the last call (a decode fills one every block_size
            # steps)
            return
        # A chain entry standing for someone else's block goes stale if that block was evicted;
        # refile from there.
        stale = next((i for i, (b, e, _) in enumerate(chain) if self.epoch[b] != e), len(chain))
        del chain[stale:]
        for i in range(len(chain), seq.num_computed // self.block_size):
            parent, parent_epoch, parent_digest = chain[i - 1] if i else (ROOT, 0, None)
            tokens = tuple(seq.tokens(i * self.block_size, (i + 1) * self.block_size))
            extra = getattr(seq, "cache_salt", None) if i == 0 else None
            digest, key = (
                self.hash_fn(parent_digest, tokens, extra),
                (parent, parent_epoch, tokens, extra),
            )
            block = self.find(digest, key)
            if block is None:
                block = seq.block_table[i]
                self.forget(
                    block
                    # after a stale entry, seq's own block may still be filed under the evicted
                    # parent
                )
                self.block_hash[block], self.block_key[block] = digest, key
                self.cached.setdefault(digest, []).append(block)
            chain.append((block, self.epoch[block], digest))

    def free(self, seq) -> None:
        """Release seq's blocks, last block first: filed ones stay findable in the free queue,
        tail before head."""
        self.pool.free(seq.block_table[::-1])
        seq.block_table = []
        self.chains.pop(seq.request_id, None)

    def reset(self) -> bool:
        """Forget every cached block (vLLM's reset_prefix_cache). Refused (False) while any
        block is held."""
        if self.pool.num_free != self.pool.num_blocks:
            return False
        for b in range(self.pool.num_blocks):
            self.forget(b)
        return True

    @property
    def num_cached_blocks(self) -> int:
        return sum(len(v) for v in self.cached.values())
