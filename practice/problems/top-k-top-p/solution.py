"""Top-k / top-p filtering of logits and seeded sampling from what is left."""

import torch


def top_k_top_p_filter(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """[B, V] -> a new [B, V] tensor with the cut tokens set to -inf (top-k first, then top-p)."""
    out = logits.clone()
    if 0 < top_k < out.shape[-1]:
        kth = torch.topk(out, top_k, dim=-1).values[:, -1:]  # [B, 1] the k-th largest per row
        out = out.masked_fill(out < kth, float("-inf"))
    if top_p < 1.0:
        probs, order = out.softmax(dim=-1).sort(dim=-1, descending=True)
        mass_before = probs.cumsum(dim=-1) - probs  # probability of the more likely tokens
        cut_sorted = mass_before >= top_p  # the crossing token has mass_before < top_p: kept
        cut = torch.zeros_like(cut_sorted).scatter(-1, order, cut_sorted)  # back to vocabulary order
        out = out.masked_fill(cut, float("-inf"))
    return out


def sample(logits: torch.Tensor, temperature: float, top_k: int, top_p: float,
           generator: torch.Generator) -> torch.Tensor:
    """One token id per row ([B], torch.long): greedy at temperature 0, else scale, filter, multinomial."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = top_k_top_p_filter(logits / temperature, top_k, top_p).softmax(dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)
