"""sampling.py — turning a row of logits into the next token, for many requests at once.

Each request brings its own `SamplingParams`. Greedy requests (temperature 0) take the argmax.
Sampled requests divide by the temperature, keep only the top-k tokens and the smallest set whose
probability reaches top-p, and draw one token. The draw uses a generator seeded from the request's
seed and its step (how many tokens it has produced), never a shared RNG: a seeded request then gets
the same tokens whether it runs alone or next to any other requests, in any order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minillm.checking import check_float, check_int, check_int_list


GREEDY_BELOW = 1e-5  # vLLM's threshold: a temperature below it samples greedily (the limit T -> 0)


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16  # new tokens to produce at most
    temperature: float = 0.0  # 0 (anything below GREEDY_BELOW) means greedy (argmax)
    top_k: int = 0  # keep the k most likely tokens; 0 keeps all
    top_p: float = 1.0  # keep the smallest set whose probability reaches top_p; 1.0 keeps all
    stop_token_ids: tuple[int, ...] = ()  # finish (reason "stop") right after producing one of these
    seed: int | None = None  # None: the engine picks one from its own seeded RNG
    ignore_eos: bool = False  # True: do not stop at the model's end-of-sequence token

    def __post_init__(self):
        # Each field checked and normalised (numpy and tensor numbers become plain ones; a list of
        # stop ids becomes a tuple, so params stay hashable); the first bad field raises, naming it.
        set_ = object.__setattr__
        set_(self, "max_tokens", check_int("max_tokens", self.max_tokens, min=1))
        set_(self, "temperature", check_float("temperature", self.temperature, min=0))
        set_(self, "top_k", check_int("top_k", self.top_k, min=0))
        set_(self, "top_p", check_float("top_p", self.top_p, min=0, min_inclusive=False, max=1))
        set_(self, "stop_token_ids", tuple(check_int_list("stop_token_ids", self.stop_token_ids, min=0)))
        if self.seed is not None:
            set_(self, "seed", check_int("seed", self.seed, min=0))
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos is {self.ignore_eos!r}: expected True or False")

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW


def step_seed(seed: int, step: int) -> int:
    """One generator seed per (request seed, step): a multiplicative hash, so nearby seeds do not overlap."""
    return (seed * 0x9E3779B97F4A7C15 + step * 0xBF58476D1CE4E5B9) % (1 << 63)


def apply_top_k_top_p(logits: torch.Tensor, top_k: list[int], top_p: list[float]) -> torch.Tensor:
    """Logits [M, V] with every token outside row i's top-k and top-p set to -inf.

    Sort each row once; a token survives if its rank is below k (k = 0: any rank) and the probability
    of the tokens ranked above it is below p, so the most likely token always survives.
    """
    M, V = logits.shape
    k = torch.tensor([t if t > 0 else V for t in top_k], device=logits.device)  # [M]
    p = torch.tensor(top_p, dtype=torch.float32, device=logits.device)  # [M]
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # [M, V]
    ranks = torch.arange(V, device=logits.device)[None, :]  # [1, V]
    probs = sorted_logits.float().softmax(dim=-1)
    mass_above = probs.cumsum(dim=-1) - probs  # [M, V] probability of the better-ranked tokens
    keep_sorted = (ranks < k[:, None]) & (mass_above < p[:, None])
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # back to vocabulary order
    return logits.masked_fill(~keep, float("-inf"))


def sample(logits: torch.Tensor, params: list[SamplingParams], seeds: list[int], steps: list[int]) -> list[int]:
    """One token per row of logits [M, V]; row i follows params[i], drawing with (seeds[i], steps[i])."""
    M = logits.shape[0]
    if not len(params) == len(seeds) == len(steps) == M:
        raise ValueError(f"{M} rows of logits but {len(params)} params, {len(seeds)} seeds, {len(steps)} steps")
    check_logits(logits)
    tokens = logits.argmax(dim=-1).tolist()  # greedy rows are done; sampled rows are overwritten below
    rows = [i for i, sp in enumerate(params) if not sp.greedy]
    if not rows:
        return tokens
    # Subtract each row's max before dividing: the best token scores exactly 0 and the others -x / T,
    # which for a tiny T is a large negative number (or -inf), never NaN; softmax then tends to the argmax.
    picked = logits[rows].float()
    picked = picked - picked.max(dim=-1, keepdim=True).values
    scaled = picked / torch.tensor([params[i].temperature for i in rows], device=logits.device)[:, None]
    scaled = apply_top_k_top_p(scaled, [params[i].top_k for i in rows], [params[i].top_p for i in rows])
    probs = scaled.softmax(dim=-1).cpu()  # [m, V]; drawing on the CPU gives the same tokens on every device
    cdf = probs.cumsum(dim=-1)
    for j, i in enumerate(rows):
        gen = torch.Generator().manual_seed(step_seed(seeds[i], steps[i]))
        u = torch.rand((), generator=gen) * cdf[j, -1]  # scale by the total: cumsum may end a hair below 1
        token = int(torch.searchsorted(cdf[j], u, right=True).clamp(max=cdf.shape[1] - 1))
        while probs[j, token] == 0:  # u can only land on a zero-probability token at a float tie: step back
            token -= 1
        tokens[i] = token
    return tokens


def check_logits(logits: torch.Tensor) -> None:
    """Raise if a row has NaN or +inf, or nothing but -inf: argmax and softmax would pick a token at random."""
    if bool(torch.isfinite(logits).all()):
        return  # the usual case: one pass over the logits
    bad = torch.isnan(logits).any(-1) | torch.isposinf(logits).any(-1) | torch.isneginf(logits).all(-1)
    if bool(bad.any()):
        row = int(bad.nonzero()[0])
        raise ValueError(f"logits row {row} holds NaN, +inf or only -inf: expected finite scores from the model "
                         "(check the checkpoint's weights and config)")
