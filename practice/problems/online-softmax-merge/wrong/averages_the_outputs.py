"""Wrong: averages the pieces' outputs, whatever the number and weight of the keys behind each.

Caught by: test_merging_two_halves_equals_the_whole.
"""

import torch


def partial_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, mask=None
):
    """q [Q, d], k, v [n, d], mask [Q, n] bool (True: the row sees the key) or None ->
    (o [Q, d] normalised over the keys a row sees, lse [Q] = log of the sum of exp(s) over
    them). A row that sees no key: o = 0, lse = -inf."""
    s = q @ k.T * scale  # [Q, n]
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    m = s.max(dim=-1).values if s.shape[1] else s.new_full(s.shape[:1], float("-inf"))  # [Q]
    m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # -inf - -inf would be NaN
    p = torch.exp(s - m_safe[:, None])  # at most 1; exactly 0 for masked keys
    l = p.sum(dim=-1)  # [Q], 0 for a row that sees nothing
    o = (p @ v) / torch.where(l > 0, l, torch.ones_like(l))[:, None]  # 0, not 0/0, when empty
    return o, m + torch.log(l)  # log 0 = -inf: an empty row's lse


def merge_partials(parts):
    """A list of (o [Q, d], lse [Q]) over disjoint keys -> the (o, lse) over their union."""
    if len(parts) == 0:
        raise ValueError("merge_partials got no parts: expected at least one (o, lse)")
    o = torch.stack([p[0] for p in parts])  # [P, Q, d]
    lse = torch.stack([p[1] for p in parts])  # [P, Q]
    top = lse.max(dim=0).values  # [Q], the common reference point
    top_safe = torch.where(torch.isinf(top), torch.zeros_like(top), top)  # all empty: 0
    w = torch.exp(lse - top_safe)  # [P, Q]: each piece's sum measured from the common max
    total = w.sum(dim=0)  # [Q]
    merged = o.mean(dim=0)  # each piece counts the same
    return merged, top_safe + torch.log(total)  # -inf where every piece was empty


def chunked_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, chunk: int
) -> torch.Tensor:
    """softmax(q k^T * scale) v [Q, d], computed chunk keys at a time and merged in one N-way
    merge."""
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk is {chunk!r}: expected an int >= 1")
    parts = [
        partial_attention(q, k[start : start + chunk], v[start : start + chunk], scale)
        for start in range(0, k.shape[0], chunk)
    ]
    return merge_partials(parts)[0]
