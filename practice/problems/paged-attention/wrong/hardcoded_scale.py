"""Wrong: scales by 1/sqrt(head_dim) instead of the scale it is given.

Caught by: test_any_grouping_block_size_and_scale.
"""

import torch


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: list[list[int]],
    seq_lens: list[int],
    query_start_loc: list[int],
    scale: float,
) -> torch.Tensor:
    """q [N, H, hd]; k_cache, v_cache [num_blocks, block_size, KV, hd] -> [N, H, hd]."""
    N, H, hd = q.shape
    block_size, KV = k_cache.shape[1], k_cache.shape[2]
    B, dev = len(seq_lens), q.device
    starts = torch.tensor(query_start_loc[:-1], device=dev)  # [B]
    n_new = torch.tensor(query_start_loc[1:], device=dev) - starts  # [B]
    seq = torch.tensor(seq_lens, device=dev)  # [B]
    max_new = int(n_new.max())

    # Each request's used blocks, padded with block 0 to the longest: one gather for all.
    used = [
        table[: (s + block_size - 1) // block_size] for table, s in zip(block_tables, seq_lens)
    ]
    max_blocks = max(len(u) for u in used)
    table = torch.tensor([u + [0] * (max_blocks - len(u)) for u in used], device=dev)
    L = max_blocks * block_size
    key_pos = torch.arange(L, device=dev)  # [L]
    live = key_pos < seq[:, None]  # [B, L]: a key of the request, not stale or filler
    # Select the stale and filler slots away: masking alone would leave 0 * NaN = NaN in w @ v.
    k = torch.where(live[:, :, None, None], k_cache[table].flatten(1, 2), 0.0)  # [B, L, KV, hd]
    v = torch.where(live[:, :, None, None], v_cache[table].flatten(1, 2), 0.0)

    # Queries padded to [B, max_new]: row j of request i is flat row starts[i] + j, if j < n_i.
    row = torch.arange(max_new, device=dev)  # [max_new]
    real = row < n_new[:, None]  # [B, max_new]
    qp = q[(starts[:, None] + row).clamp(max=N - 1)]  # [B, max_new, H, hd]; padded rows dropped
    # End-aligned causal mask: query j of request i sits at position seq_i - n_i + j.
    q_pos = seq[:, None] - n_new[:, None] + row  # [B, max_new]
    sees = key_pos <= q_pos[:, :, None]  # [B, max_new, L]

    G = H // KV  # GQA by a reshape of q: the G query heads of one KV head, K/V never copied
    # [B, max_new, H, hd] -> [B, KV, G, max_new, hd]
    qg = qp.view(B, max_new, KV, G, hd).permute(0, 2, 3, 1, 4).float()
    kt = k.permute(0, 2, 3, 1)[:, :, None].float()  # [B, KV, 1, hd, L]
    scores = torch.matmul(qg, kt) * hd**-0.5  # [B, KV, G, max_new, L]
    weights = scores.masked_fill(~sees[:, None, None], float("-inf")).softmax(dim=-1)
    vt = v.permute(0, 2, 1, 3)[:, :, None].float()  # [B, KV, 1, L, hd]
    o = torch.matmul(weights, vt)  # [B, KV, G, max_new, hd]
    o = o.permute(0, 3, 1, 2, 4).reshape(B, max_new, H, hd)
    return o[real].to(q.dtype)  # [N, H, hd]: the real rows, in request order
