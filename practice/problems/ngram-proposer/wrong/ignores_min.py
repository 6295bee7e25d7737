"""Wrong: ignores prompt_lookup_min, so a single-token match always counts.

Caught by: test_prompt_lookup_min_and_max_bound_the_suffix.
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
    for n in range(min(prompt_lookup_max, L - 1), 0, -1):
        for s in range(L - n):
            if context[s : s + n] == context[L - n :]:
                return list(context[s + n : s + n + k])
    return []
