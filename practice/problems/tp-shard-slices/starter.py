"""The slice of every checkpoint tensor that one tensor-parallel rank holds, with KV heads
replicated when few."""

import torch


def kv_heads_of_rank(num_key_value_heads: int, rank: int, tp_size: int) -> list[int]:
    """The KV heads rank `rank` holds: an equal share, or one head replicated on tp_size / KV
    ranks."""
    raise NotImplementedError("kv_heads_of_rank")


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
    raise NotImplementedError("shard_for_rank")
