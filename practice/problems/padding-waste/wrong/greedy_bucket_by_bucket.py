"""Wrong: fills buckets longest first, each kept under the limit on its own.

Caught by: test_fewest_buckets_counts_the_total_waste.
"""


def _check(query_lens: list[int]) -> None:
    if not query_lens or min(query_lens) < 1:
        raise ValueError(
            f"query_lens {query_lens}: expected at least one request, each with >= 1 token"
        )


def padded_tokens(query_lens: list[int]) -> int:
    """Tokens a padded batch computes: B * the longest request."""
    _check(query_lens)
    return len(query_lens) * max(query_lens)


def padding_waste(query_lens: list[int]) -> float:
    """The fraction of the padded batch that is padding."""
    return 1 - sum(query_lens) / padded_tokens(query_lens)


def pad(token_lists: list[list[int]], pad_id: int) -> list[list[int]]:
    """Every list filled on the right with pad_id to the longest length."""
    width = max(len(t) for t in token_lists)
    return [list(t) + [pad_id] * (width - len(t)) for t in token_lists]


def pack(token_lists: list[list[int]]) -> tuple[list[int], list[int]]:
    """(all tokens end to end, query_start_loc with B + 1 offsets)."""
    flat, starts = [], [0]
    for tokens in token_lists:
        flat.extend(tokens)
        starts.append(len(flat))
    return flat, starts


def unpack(flat: list[int], query_start_loc: list[int]) -> list[list[int]]:
    """The token lists back from a packed batch."""
    return [list(flat[a:b]) for a, b in zip(query_start_loc, query_start_loc[1:])]


def fewest_buckets(query_lens: list[int], max_waste: float) -> int:
    """The fewest buckets, each padded to its own longest request, whose padding is at most
    max_waste of their padded work in all."""
    _check(query_lens)
    if not 0 <= max_waste < 1:
        raise ValueError(f"max_waste {max_waste!r}: expected 0 <= max_waste < 1")
    buckets = [[]]
    for n in sorted(query_lens, reverse=True):
        b = buckets[-1] + [n]
        if buckets[-1] and 1 - sum(b) / (len(b) * b[0]) > max_waste + 1e-12:
            buckets.append([n])
        else:
            buckets[-1] = b
    return len(buckets)
