"""Prompt lookup: propose what followed the first occurrence of the context's longest matching
suffix."""


def ngram_propose(
    context: list[int], k: int, prompt_lookup_min: int, prompt_lookup_max: int
) -> list[int]:
    """Up to k tokens after the first occurrence of the longest suffix of min..max tokens (not
    the suffix itself); [] if none."""
    raise NotImplementedError("ngram_propose")
