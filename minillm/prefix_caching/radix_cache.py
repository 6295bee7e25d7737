"""prefix_caching/radix_cache.py — SGLang's prefix cache design: a radix tree over token ids,
for side-by-side comparison.

Every path from the root spells a token sequence whose K/V are cached; a node holds a run of
tokens (its `key`) that all of its descendants share. `match_prefix` walks down as far as the
tokens agree, at token granularity, and splits a node when the match ends inside it; `insert`
adds what is new as one leaf. A running request locks its path (`inc_lock_ref`: the count goes
up on every node up to the root), and `evict` removes the least recently used unlocked leaves
first.

This tree stores token ids only (no K/V): the book uses it to count what each design would hit
and hold on the same traffic (prefix_caching/simulator.py). In SGLang each node's `value` is the
K/V slots of its tokens.
"""

from __future__ import annotations

import heapq
import itertools

from minillm.checking import check_int, check_int_list


class TreeNode:
    __slots__ = ("children", "parent", "key", "lock_ref", "last_access")

    def __init__(self, key: list[int], parent: TreeNode | None):
        self.children: dict[int, TreeNode] = {}  # first token of the child's key -> child
        self.parent, self.key = parent, key
        self.lock_ref = 0  # running requests whose cached prefix passes through this node
        self.last_access = 0  # logical time of the last match or insert that walked through it


class RadixCache:
    def __init__(self):
        self.root = TreeNode([], None)
        self.root.lock_ref = 1  # the root is never evicted
        # a logical clock: ties and order are the same on every run
        self.clock = itertools.count(1)
        self.total_size = 0  # tokens held by the tree
        self.protected_size = 0  # of which on a locked path

    @property
    def evictable_size(self) -> int:
        return self.total_size - self.protected_size

    def match_prefix(self, token_ids) -> tuple[int, TreeNode]:
        """(length of the longest cached prefix of token_ids, the node where it ends). Splits a
        node if needed."""
        token_ids = check_int_list("token_ids", token_ids)
        node, matched, now = self.root, 0, next(self.clock)
        node.last_access = now
        while matched < len(token_ids) and token_ids[matched] in node.children:
            child = node.children[token_ids[matched]]
            n = common_prefix_len(child.key, token_ids[matched:])
            child.last_access = now
            if n < len(child.key):
                # the match ends inside child: make its first n tokens a node
                node = self._split(child, n)
                matched += n
                break
            node, matched = child, matched + n
        return matched, node

    def insert(self, token_ids) -> int:
        """Cache token_ids; returns how many of them were cached already."""
        token_ids = check_int_list("token_ids", token_ids)
        matched, node = self.match_prefix(token_ids)
        if matched < len(token_ids):
            leaf = TreeNode(list(token_ids[matched:]), node)
            leaf.last_access = node.last_access
            node.children[leaf.key[0]] = leaf
            self.total_size += len(leaf.key)
        return matched

    def _split(self, child: TreeNode, n: int) -> TreeNode:
        """Cut child's key after n tokens: a new node with the first n becomes child's
        parent."""
        head = TreeNode(child.key[:n], child.parent)
        head.lock_ref, head.last_access = child.lock_ref, child.last_access
        head.children[child.key[n]] = child
        child.parent.children[child.key[0]] = head
        child.key, child.parent = child.key[n:], head
        return head

    def inc_lock_ref(self, node: TreeNode) -> None:
        """A request starts using the prefix ending at node: protect the whole path from
        eviction."""
        while node is not self.root:
            if node.lock_ref == 0:
                self.protected_size += len(node.key)
            node.lock_ref += 1
            node = node.parent

    def dec_lock_ref(self, node: TreeNode) -> None:
        while node is not self.root:
            if node.lock_ref == 0:
                raise ValueError(
                    "dec_lock_ref on an unlocked node: every dec needs an earlier inc"
                )
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self.protected_size -= len(node.key)
            node = node.parent

    def evict(self, num_tokens: int) -> int:
        """Remove least recently used unlocked leaves until num_tokens tokens are freed (or none
        is left)."""
        num_tokens = check_int("num_tokens", num_tokens, min=0)
        order = itertools.count()  # a tie-breaker, so heapq never compares nodes
        heap = [
            (leaf.last_access, next(order), leaf)
            for leaf in self._leaves()
            if leaf.lock_ref == 0
        ]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            del parent.children[leaf.key[0]]
            freed += len(leaf.key)
            self.total_size -= len(leaf.key)
            if parent is not self.root and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, next(order), parent))  # a new leaf
        return freed

    def _leaves(self):
        stack = [self.root]
        while stack:
            node = stack.pop()
            if not node.children and node is not self.root:
                yield node
            stack.extend(node.children.values())

    def num_nodes(self) -> int:
        """Nodes besides the root: the tree's index entries."""
        count, stack = 0, list(self.root.children.values())
        while stack:
            node = stack.pop()
            count += 1
            stack.extend(node.children.values())
        return count

    def pretty(self, show: int = 6) -> str:
        """One line per node, indented by depth: its length, first tokens and lock count."""
        lines = []

        def walk(node, depth):
            for child in sorted(node.children.values(), key=lambda c: c.key[0]):
                head = " ".join(map(str, child.key[:show])) + (
                    " ..." if len(child.key) > show else ""
                )
                lines.append(
                    f"{'  ' * depth}[{len(child.key)} tokens: {head}] lock_ref={child.lock_ref}"
                )
                walk(child, depth + 1)

        walk(self.root, 0)
        return "\n".join(lines)


def common_prefix_len(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
