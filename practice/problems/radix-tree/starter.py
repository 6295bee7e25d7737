"""SGLang's radix tree over token ids: longest-prefix match with node splits, and insertion."""


class RadixTree:
    def __init__(self):
        raise NotImplementedError("RadixTree")

    def match_prefix(self, token_ids: list[int]) -> int:
        """Length of the longest cached prefix; splits the node where the match ends inside its
        key."""
        raise NotImplementedError("match_prefix")

    def insert(self, token_ids: list[int]) -> int:
        """Cache token_ids (what is new becomes one leaf); returns how many tokens were cached
        already."""
        raise NotImplementedError("insert")

    def num_nodes(self) -> int:
        """Nodes besides the root."""
        raise NotImplementedError("num_nodes")

    def total_tokens(self) -> int:
        """Tokens held by the tree: the sum of its keys' lengths."""
        raise NotImplementedError("total_tokens")
