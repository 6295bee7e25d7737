"""Wrong: never checks its arguments, so k = 0 quietly proposes nothing.

Caught by: test_bad_arguments_are_rejected_by_name.
"""


def ngram_propose(
    context: list[int], k: int, prompt_lookup_min: int, prompt_lookup_max: int
) -> list[int]:
    """Up to k tokens after the first occurrence of the longest suffix of min..max tokens (not
    the suffix itself); [] if none."""
    L = len(context)
    for n in range(min(prompt_lookup_max, L - 1), prompt_lookup_min - 1, -1):
        for s in range(L - n):
            if context[s : s + n] == context[L - n :]:
                return list(context[s + n : s + n + k])
    return []
