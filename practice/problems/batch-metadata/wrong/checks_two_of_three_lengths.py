"""Wrong: compares the lengths of num_new and need_logits only: a num_computed of another length
is
zipped away silently (a request dropped, or an extra value ignored).

Caught by: test_lists_of_different_lengths_raise_value_error.
"""


def batch_metadata(
    num_computed: list[int], num_new: list[int], need_logits: list[bool]
) -> dict[str, list[int]]:
    """Per request: tokens already cached, new tokens this step, whether it samples after this
    step."""
    if len(num_new) != len(need_logits):  # num_computed goes with num_new anyway
        raise ValueError(
            f"got {len(num_computed)} num_computed, {len(num_new)} num_new and "
            f"{len(need_logits)} "
            "need_logits: expected one of each per request"
        )
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
