"""Wrong: gives the last rank only the vocabulary rows that exist, so the tables differ in
height.

Caught by: test_the_vocabulary_is_padded_to_equal_heights.
"""

import torch


def _check(num_attention_heads: int, num_key_value_heads: int, tp_size: int) -> None:
    if num_attention_heads % tp_size:
        raise ValueError(
            f"tp_size {tp_size} does not divide the {num_attention_heads} query heads"
        )
    if num_key_value_heads % tp_size and tp_size % num_key_value_heads:
        raise ValueError(
            f"tp_size {tp_size} and {num_key_value_heads} KV heads: expected one to divide "
            "the other"
        )


def kv_heads_of_rank(num_key_value_heads: int, rank: int, tp_size: int) -> list[int]:
    """The KV heads rank `rank` holds: an equal share, or one head replicated on tp_size / KV
    ranks."""
    if num_key_value_heads % tp_size and tp_size % num_key_value_heads:
        raise ValueError(
            f"tp_size {tp_size} and {num_key_value_heads} KV heads: expected one to divide "
            "the other"
        )
    if tp_size <= num_key_value_heads:
        per = num_key_value_heads // tp_size
        return list(range(rank * per, (rank + 1) * per))
    return [rank // (tp_size // num_key_value_heads)]


def shard_for_rank(
    name: str,
    weight: torch.Tensor,
    rank: int,
    tp_size: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    head_dim: int,
) -> torch.Tensor:
    """Rank `rank`'s slice of checkpoint tensor `name`."""
    _check(num_attention_heads, num_key_value_heads, tp_size)
    module = name.split(".")[-2]
    q_rows = num_attention_heads // tp_size * head_dim
    if module == "q_proj":
        return weight[rank * q_rows : (rank + 1) * q_rows]
    if module == "o_proj":
        return weight[:, rank * q_rows : (rank + 1) * q_rows]
    if module in ("k_proj", "v_proj"):
        heads = kv_heads_of_rank(num_key_value_heads, rank, tp_size)
        return weight[heads[0] * head_dim : (heads[-1] + 1) * head_dim]
    if module in ("gate_proj", "up_proj"):
        per = weight.shape[0] // tp_size
        return weight[rank * per : (rank + 1) * per]
    if module == "down_proj":
        per = weight.shape[1] // tp_size
        return weight[:, rank * per : (rank + 1) * per]
    if module in ("embed_tokens", "lm_head"):
        per = -(-weight.shape[0] // tp_size)
        rows = weight[rank * per : (rank + 1) * per]
        return rows
    return weight
