"""spec_decode/rejection_sampler.py — verifying k draft tokens against the target's k+1 rows of
logits.

Greedy (temperature 0): accept the drafts while each equals the target's argmax at its position;
the first mismatch is replaced by the target's argmax there, and if all k match the target's
argmax after the last draft is a free extra token, the "bonus". Either way a verify produces
accepted + 1 tokens.

Sampled (temperature > 0): draft token x was drawn from the draft's distribution q; accept it
with probability min(1, p(x) / q(x)), where p is the target's distribution at that position. On
the first rejection, draw the replacement from the residual norm(max(0, p - q)) and stop. If
every draft is accepted, draw the bonus from p after the last one. Then every emitted token is
distributed exactly as the target's sampling would have produced it (the proof is in chapter 9).
A proposer without probabilities (n-gram lookup) is a q that puts all its mass on the proposed
token.

Every draw uses a generator seeded from (request seed, output step, purpose), never a shared
RNG, so a seeded request's draws never depend on other requests' tokens. They do depend on how
many of its own proposals are verified: when the scheduler trims or drops them (a short token
budget or pool, disable_by_batch_size), the same seed gives different tokens from the same
distribution.
"""

from __future__ import annotations

import torch

from minillm.sampling import SamplingParams, apply_min_p, apply_top_k_top_p, step_seed

ACCEPT, RESIDUAL = (
    0x5EC1,
    0x5EC2,
)  # purposes: a seed's acceptance coins and its residual draws never share a stream


def greedy_verify(
    target_argmax: torch.Tensor, draft: torch.Tensor, num_draft: list[int]
) -> list[list[int]]:
    """Greedy verification for R requests at once.

    target_argmax [R, K+1]: the target's argmax after the context and after each draft (padded
    rows); draft [R, K]: the proposed tokens (padded); num_draft[r]: how many of row r's drafts
    are real. Returns per request the tokens to emit: the accepted drafts, then the target's own
    next token.
    """
    R, K = draft.shape
    if target_argmax.shape != (R, K + 1) or len(num_draft) != R:
        raise ValueError(
            f"target_argmax {tuple(target_argmax.shape)}, draft {tuple(draft.shape)} and "
            f"{len(num_draft)} counts: expected [R, K+1], [R, K] and R counts"
        )
    cols = torch.arange(K)[None, :]  # [1, K]
    real = (
        cols < torch.tensor(num_draft, dtype=torch.long)[:, None]
    )  # [R, K] the drafts that exist
    match = (draft == target_argmax[:, :K]) & real  # [R, K]
    accepted = match.long().cumprod(dim=1).sum(dim=1)  # [R] length of the all-match prefix
    rows = target_argmax.tolist()
    return [rows[r][:a] + [rows[r][a]] for r, a in enumerate(accepted.tolist())]


def target_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The distribution sampling.sample draws from for these rows of logits [n, V]: temperature,
    then min_p, then top-k and top-p, in sample's order (a filter left out here would make
    speculation draw from a different distribution than plain sampling)."""
    x = logits.float()
    x = (x - x.max(dim=-1, keepdim=True).values) / params.temperature
    if params.min_p > 0:
        x = apply_min_p(x, [params.min_p] * len(x))
    x = apply_top_k_top_p(x, [params.top_k] * len(x), [params.top_p] * len(x))
    return x.softmax(dim=-1)  # [n, V]


def _draw(probs: torch.Tensor, gen: torch.Generator) -> int:
    """One token from a probability row (need not sum to exactly 1), by inverse CDF."""
    cdf = probs.double().cumsum(dim=-1)
    u = torch.rand((), generator=gen, dtype=torch.float64) * cdf[-1]
    token = int(torch.searchsorted(cdf, u, right=True).clamp(max=len(cdf) - 1))
    while (
        probs[token] == 0
    ):  # only at a float tie on a zero-probability token: step back to a real one
        token -= 1
    return token


def rejection_sample(
    p: torch.Tensor,
    draft: list[int],
    q: torch.Tensor | None,
    seed: int,
    step: int,
    residual: bool = True,
) -> list[int]:
    """Tokens to emit for one request: p [k+1, V] the target's distributions (after the context,
    after
    each draft), draft the k proposed tokens, q [k, V] the draft's distributions (None: one-hot
    on the drafts, as for n-gram lookup), step the request's output count before this verify.

    residual=False is the deliberately wrong sampler of the chapter's test: on rejection it
    redraws from p itself, which over-produces the tokens the draft favoured.
    """
    k = len(draft)
    if p.shape[0] != k + 1 or (q is not None and q.shape != (k, p.shape[1])):
        raise ValueError(
            f"p has {p.shape[0]} rows and q {None if q is None else tuple(q.shape)} for {k} "
            "drafts: "
            f"expected k+1 = {k + 1} rows of p and [k, V] q"
        )
    p, out = p.double().cpu(), []
    if q is None:
        q = torch.zeros(k, p.shape[1], dtype=torch.float64)
        q[torch.arange(k), torch.tensor(draft, dtype=torch.long)] = 1.0
    q = q.double().cpu()
    for j, x in enumerate(draft):
        coin = torch.Generator().manual_seed(step_seed(seed ^ ACCEPT, step + j))
        u = float(torch.rand((), generator=coin, dtype=torch.float64))
        if q[j, x] > 0 and u < min(1.0, float(p[j, x] / q[j, x])):
            out.append(x)
            continue
        gen = torch.Generator().manual_seed(step_seed(seed ^ RESIDUAL, step + j))
        rest = (p[j] - q[j]).clamp(min=0) if residual else p[j]
        if (
            float(rest.sum()) <= 0
        ):  # p == q exactly: a rejection has probability 0, so this is a float corner
            rest = p[j]
        out.append(_draw(rest, gen))
        return out
    gen = torch.Generator().manual_seed(step_seed(seed ^ RESIDUAL, step + k))
    out.append(
        _draw(p[k], gen)
    )  # every draft accepted: the bonus comes straight from the target
    return out


def verify(
    logits: torch.Tensor,
    draft: list[int],
    q: torch.Tensor | None,
    params: SamplingParams,
    seed: int,
    step: int,
) -> list[int]:
    """One request's verify: logits [k+1, V] of the target at the last token and at each
    draft."""
    if params.greedy:
        return greedy_verify(
            logits.argmax(dim=-1)[None, :],
            torch.tensor([draft], dtype=torch.long).view(1, -1),
            [len(draft)],
        )[0]
    return rejection_sample(target_probs(logits, params), draft, q, seed, step)
