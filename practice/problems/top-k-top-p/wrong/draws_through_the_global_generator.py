"""Wrong: draws the generator's numbers through torch's default generator (loading its state,
then
copying it back): the same tokens, and the generator moves on, but the process's global random
state is overwritten.

Caught by: test_draws_follow_torch_multinomial_with_the_seed.
"""

import torch


def top_k_top_p_filter(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """[B, V] -> a new [B, V] tensor with the cut tokens set to -inf (top-k first, then
    top-p)."""
    out = logits
    if 0 < top_k < out.shape[-1]:
        kth = torch.topk(out, top_k, dim=-1).values[:, -1:]  # [B, 1] the k-th largest per row
        out = out.masked_fill(out < kth, float("-inf"))  # ties with the k-th are kept
    if top_p < 1.0:
        probs = out.float().softmax(dim=-1)  # [B, V], what top-k kept, renormalised
        ranked = probs.sort(dim=-1, descending=True).values
        mass_before = ranked.cumsum(dim=-1) - ranked  # probability of the more likely tokens
        kept = mass_before < top_p  # a prefix: the crossing token still has mass_before < top_p
        smallest = (
            ranked.masked_fill(~kept, float("inf")).min(dim=-1, keepdim=True).values
        )  # [B, 1]
        out = out.masked_fill(
            probs < smallest, float("-inf")
        )  # a tie with the crossing token is kept too
    return out.clone() if out is logits else out


def sample(
    logits: torch.Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
    generator: torch.Generator,
) -> torch.Tensor:
    """One token id per row ([B], torch.long): greedy at temperature 0, else scale, filter,
    multinomial."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = top_k_top_p_filter(logits / temperature, top_k, top_p).softmax(dim=-1)
    torch.set_rng_state(generator.get_state())  # the generator's numbers, by default
    tokens = torch.multinomial(probs, num_samples=1).squeeze(-1)
    generator.set_state(torch.get_rng_state())  # and move the generator on as far
    return tokens
