"""Wrong: accepts a tp_size that the KV heads do not fit: with neither dividing the
other, some ranks get KV heads their query heads do not read.

Caught by: test_a_split_that_does_not_fit_is_refused.
"""

import torch
import torch.nn.functional as F  # noqa: F401 (F.linear, F.softmax)


def _heads(q_weight, k_weight, tp_size: int, head_dim: int) -> tuple[int, int]:
    """(query heads, KV heads) of the whole layer, checked against tp_size."""
    num_heads, num_kv = q_weight.shape[0] // head_dim, k_weight.shape[0] // head_dim
    if num_heads % tp_size:
        raise ValueError(f"tp_size {tp_size} does not divide the {num_heads} query heads")
    return num_heads, num_kv


def _kv_heads(num_kv: int, rank: int, tp_size: int) -> range:
    if tp_size <= num_kv:  # a block of whole heads per rank
        per = num_kv // tp_size
        return range(rank * per, (rank + 1) * per)
    head = rank * num_kv // tp_size  # the head this rank's query heads read, replicated
    return range(head, head + 1)


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
    num_heads, num_kv = _heads(q_weight, k_weight, tp_size, head_dim)
    per = num_heads // tp_size
    kv = _kv_heads(num_kv, rank, tp_size)
    q = q_weight[rank * per * head_dim : (rank + 1) * per * head_dim]
    k = k_weight[kv.start * head_dim : kv.stop * head_dim]
    v = v_weight[kv.start * head_dim : kv.stop * head_dim]
    return torch.cat([q, k, v], dim=0)


def qkv_parallel_linear(
    x: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    v_weight: torch.Tensor,
    tp_size: int,
    head_dim: int,
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Each rank's (q, k, v) [..., heads * head_dim] from one product with its fused shard."""
    num_heads, num_kv = _heads(q_weight, k_weight, tp_size, head_dim)
    q_size = num_heads // tp_size * head_dim
    kv_size = len(_kv_heads(num_kv, 0, tp_size)) * head_dim
    out = []
    for r in range(tp_size):
        fused = F.linear(x, qkv_shard(q_weight, k_weight, v_weight, r, tp_size, head_dim))
        out.append(tuple(fused.split([q_size, kv_size, kv_size], dim=-1)))
    return out


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
    num_heads, _ = _heads(q_weight, k_weight, tp_size, head_dim)
    per = num_heads // tp_size
    tokens = x.shape[0]
    causal = torch.ones(tokens, tokens, dtype=torch.bool).tril()
    partials = []
    for r, (q, k, v) in enumerate(
        qkv_parallel_linear(x, q_weight, k_weight, v_weight, tp_size, head_dim)
    ):
        q = q.view(tokens, per, head_dim).transpose(0, 1)  # [heads, T, hd]
        k = k.view(tokens, -1, head_dim).transpose(0, 1)  # [kv, T, hd]
        v = v.view(tokens, -1, head_dim).transpose(0, 1)
        group = per // k.shape[0]  # this rank's query heads per KV head it holds
        k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
        scores = (q @ k.transpose(1, 2)) * head_dim**-0.5  # [heads, T, T]
        scores = scores.masked_fill(~causal, float("-inf"))
        attn = (F.softmax(scores, dim=-1) @ v).transpose(0, 1).reshape(tokens, -1)
        o = o_weight[:, r * per * head_dim : (r + 1) * per * head_dim]  # o's input columns
        partials.append(F.linear(attn, o))  # [T, hidden]: a partial sum
    return all_reduce(partials)
