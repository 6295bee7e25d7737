"""Wrong: adds the new tokens as a leaf under the root instead of under the node where the match
ended.

Caught by: test_insert_branches_off_inside_a_node.
"""


class _Node:
    def __init__(self, key: list[int], parent):
        self.key, self.parent, self.children = (
            key,
            parent,
            {},
        )  # children: first token of the child's key -> child


class RadixTree:
    def __init__(self):
        self.root = _Node([], None)

    def _match(self, token_ids: list[int]):
        """(matched length, the node where the match ends), splitting a node the match ends
        inside."""
        node, matched = self.root, 0
        while matched < len(token_ids) and token_ids[matched] in node.children:
            child = node.children[token_ids[matched]]
            n = 0
            while (
                n < len(child.key)
                and matched + n < len(token_ids)
                and child.key[n] == token_ids[matched + n]
            ):
                n += 1
            matched += n
            if n < len(
                child.key
            ):  # the match ends inside child: its first n tokens become their own node
                head = _Node(child.key[:n], node)
                node.children[child.key[0]] = head
                child.key, child.parent = child.key[n:], head
                head.children[child.key[0]] = child
                return matched, head
            node = child
        return matched, node

    def match_prefix(self, token_ids: list[int]) -> int:
        """Length of the longest cached prefix; splits the node where the match ends inside its
        key."""
        return self._match(list(token_ids))[0]

    def insert(self, token_ids: list[int]) -> int:
        """Cache token_ids (what is new becomes one leaf); returns how many tokens were cached
        already."""
        token_ids = list(token_ids)
        matched, node = self._match(token_ids)
        if matched < len(token_ids):
            self.root.children.setdefault(
                token_ids[matched], _Node(token_ids[matched:], self.root)
            )
        return matched

    def _nodes(self):
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def num_nodes(self) -> int:
        """Nodes besides the root."""
        return sum(1 for _ in self._nodes())

    def total_tokens(self) -> int:
        """Tokens held by the tree: the sum of its keys' lengths."""
        return sum(len(node.key) for node in self._nodes())
