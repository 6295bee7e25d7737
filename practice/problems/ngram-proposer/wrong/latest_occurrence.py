"""Wrong: takes the latest occurrence of the suffix where the problem asks for the earliest.

Caught by: test_the_example.
"""


def ngram_propose(
    context: list[int], k: int, prompt_lookup_min: int, prompt_lookup_max: int
) -> list[int]:
    """Up to k tokens after the first occurrence of the longest suffix of min..max tokens (not
    the suffix itself); [] if none."""
    if k < 1:
        raise ValueError(f"k is {k}: expected an int >= 1")
    if prompt_lookup_min < 1:
        raise ValueError(f"prompt_lookup_min is {prompt_lookup_min}: expected an int >= 1")
    if prompt_lookup_max < prompt_lookup_min:
        raise ValueError(
            f"prompt_lookup_max is {prompt_lookup_max}: expected >= prompt_lookup_min"
        )
    L = len(context)
    for n in range(min(prompt_lookup_max, L - 1), prompt_lookup_min - 1, -1):
        for s in range(L - n - 1, -1, -1):
            if context[s : s + n] == context[L - n :]:
                return list(context[s + n : s + n + k])
    return []
