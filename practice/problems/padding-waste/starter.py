"""Padded [B, max_len] vs packed (flat + query_start_loc) layouts, what padding wastes, and how
few length buckets bring the waste under a limit."""


def padded_tokens(query_lens: list[int]) -> int:
    """Tokens a padded batch computes: B * the longest request."""
    raise NotImplementedError("padded_tokens")


def padding_waste(query_lens: list[int]) -> float:
    """The fraction of the padded batch that is padding."""
    raise NotImplementedError("padding_waste")


def pad(token_lists: list[list[int]], pad_id: int) -> list[list[int]]:
    """Every list filled on the right with pad_id to the longest length."""
    raise NotImplementedError("pad")


def pack(token_lists: list[list[int]]) -> tuple[list[int], list[int]]:
    """(all tokens end to end, query_start_loc with B + 1 offsets)."""
    raise NotImplementedError("pack")


def unpack(flat: list[int], query_start_loc: list[int]) -> list[list[int]]:
    """The token lists back from a packed batch."""
    raise NotImplementedError("unpack")


def fewest_buckets(query_lens: list[int], max_waste: float) -> int:
    """The fewest buckets, each padded to its own longest request, whose padding is at most
    max_waste of their padded work in all."""
    raise NotImplementedError("fewest_buckets")
