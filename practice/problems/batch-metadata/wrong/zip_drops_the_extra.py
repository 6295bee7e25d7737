"""Wrong: does not compare the lengths: zip quietly drops what does not pair up.

Caught by: test_lists_of_different_lengths_raise_value_error.
"""


def batch_metadata(
    num_computed: list[int], num_new: list[int], need_logits: list[bool]
) -> dict[str, list[int]]:
    """Per request: tokens already cached, new tokens this step, whether it samples after this
    step."""
    query_start_loc, seq_lens, positions, logits_indices = [0], [], [], []
    for i, (cached, new, sample) in enumerate(zip(num_computed, num_new, need_logits)):
        if new < 1 or cached < 0:
            raise ValueError(
                f"request {i} has num_computed={cached}, num_new={new}: expected >= 0 and >= 1"
            )
        positions.extend(range(cached, cached + new))
        query_start_loc.append(query_start_loc[-1] + new)
        seq_lens.append(cached + new)
        if sample:
            logits_indices.append(query_start_loc[-1] - 1)
    return {
        "query_start_loc": query_start_loc,
        "seq_lens": seq_lens,
        "positions": positions,
        "logits_indices": logits_indices,
    }
