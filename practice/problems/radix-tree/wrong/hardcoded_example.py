"""Wrong: keeps a flat list of sequences and counts nodes by a formula that fits only the
example.

Caught by: test_random_sequences_match_the_longest_common_prefix.
"""


class RadixTree:
    def __init__(self):
        self.seqs, self.splits = [], 0

    def _lcp(self, token_ids: list[int]) -> int:
        best = 0
        for s in self.seqs:
            n = 0
            while n < min(len(s), len(token_ids)) and s[n] == token_ids[n]:
                n += 1
            best = max(best, n)
        return best

    def match_prefix(self, token_ids: list[int]) -> int:
        """Length of the longest cached prefix; splits the node where the match ends inside its
        key."""
        n = self._lcp(list(token_ids))
        if 0 < n and all(len(s) > n for s in self.seqs if s[:n] == list(token_ids)[:n]):
            self.splits += 1
        return n

    def insert(self, token_ids: list[int]) -> int:
        """Cache token_ids (what is new becomes one leaf); returns how many tokens were cached
        already."""
        n = self._lcp(list(token_ids))
        self.seqs.append(list(token_ids))
        return n

    def num_nodes(self) -> int:
        """Nodes besides the root."""
        return 2 * len(self.seqs) - 1 + self.splits if self.seqs else 0

    def total_tokens(self) -> int:
        """Tokens held by the tree: the sum of its keys' lengths."""
        return len({tuple(s[:i]) for s in self.seqs for i in range(1, len(s) + 1)})
