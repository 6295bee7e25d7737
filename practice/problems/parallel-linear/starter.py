"""A fused QKV column-parallel projection with KV heads replicated when there are fewer of them
than ranks, and the attention block around it, with every rank played here."""

import torch
import torch.nn.functional as F  # noqa: F401 (F.linear, F.softmax)


def qkv_shard(
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    v_weight: torch.Tensor,
    rank: int,
    tp_size: int,
    head_dim: int,
) -> torch.Tensor:
    """Rank `rank`'s fused weight [(H / tp_size + 2 * kv) * head_dim, hidden]: its query heads'
    rows of q, then its KV heads' rows of k, then the same rows of v."""
    raise NotImplementedError("qkv_shard")


def qkv_parallel_linear(
    x: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    v_weight: torch.Tensor,
    tp_size: int,
    head_dim: int,
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Each rank's (q, k, v) [..., heads * head_dim] from one product with its fused shard."""
    raise NotImplementedError("qkv_parallel_linear")


def tensor_parallel_attention(
    x: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    v_weight: torch.Tensor,
    o_weight: torch.Tensor,
    tp_size: int,
    head_dim: int,
    all_reduce,
) -> list[torch.Tensor]:
    """Causal attention over x [tokens, hidden] on each rank's own heads, o_proj row-parallel,
    one all_reduce: each rank's output [tokens, hidden]."""
    raise NotImplementedError("tensor_parallel_attention")
