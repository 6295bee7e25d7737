"""sampling.py — turning a row of logits into the next token, for many requests at once.

Each request brings its own `SamplingParams`. Greedy requests (temperature 0) take the argmax.
Sampled requests divide by the temperature, keep only the top-k tokens and the smallest set
whose probability reaches top-p, and draw one token. The draw uses a generator seeded from the
request's seed and its step (how many tokens it has produced), never a shared RNG: a seeded
request then gets the same tokens whether it runs alone or next to any other requests, in any
order.

The fields OpenAI's API adds are applied in vLLM's order (vllm/v1/sample/sampler.py):
`logit_bias` first, then the penalties (`repetition_penalty` on tokens of prompt and output,
`frequency_penalty` and `presence_penalty` on the output's), then greedy's argmax or, for
sampled rows, the temperature, `min_p`, top-k and top-p. `logprobs` are those of the raw logits
(vLLM's default "raw_logprobs"): what the model said, before any of these changed it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minillm.checking import check_float, check_int, check_int_list
from minillm.structured_output.params import StructuredOutputsParams

GREEDY_BELOW = (
    1e-5  # vLLM's threshold: a temperature below it samples greedily (the limit T -> 0)
)
MAX_LOGPROBS = 20  # OpenAI's limit on top_logprobs (vLLM's --max-logprobs defaults to 20 too)


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16  # new tokens to produce at most
    temperature: float = 0.0  # 0 (anything below GREEDY_BELOW) means greedy (argmax)
    top_k: int = 0  # keep the k most likely tokens; 0 keeps all
    top_p: float = 1.0  # keep the smallest set whose probability reaches top_p; 1.0 keeps all
    stop_token_ids: tuple[
        int, ...
    ] = ()  # finish (reason "stop") right after producing one of these
    seed: int | None = None  # None: the engine picks one from its own seeded RNG
    ignore_eos: bool = False  # True: do not stop at the model's end-of-sequence token
    n: int = 1  # completions per prompt (the server runs n requests; see serving/server.py)
    logprobs: int | None = (
        None  # return each sampled token's logprob and the top-k ones (0: the token's only)
    )
    prompt_logprobs: int | None = (
        None  # the same for every prompt token (computed in the prefill)
    )
    presence_penalty: float = 0.0  # subtracted once from every token already in the output
    frequency_penalty: float = 0.0  # subtracted once per occurrence in the output
    repetition_penalty: float = (
        1.0  # divides positive (multiplies negative) logits of prompt and output tokens
    )
    min_p: float = 0.0  # drop tokens less likely than min_p times the most likely one
    logit_bias: tuple[
        tuple[int, float], ...
    ] = ()  # (token id, bias) pairs; a {id: bias} dict is accepted
    # chapter 12: a JSON schema, regex, choice or grammar the output must follow (a dict of
    # vLLM's fields is accepted); its bitmask is applied before everything above
    structured_outputs: StructuredOutputsParams | None = None

    def __post_init__(self):
        # Each field checked and normalised (numpy and tensor numbers become plain ones; a list
        # of stop ids becomes a tuple, so params stay hashable); the first bad field raises,
        # naming it.
        set_ = object.__setattr__
        set_(self, "max_tokens", check_int("max_tokens", self.max_tokens, min=1))
        set_(self, "temperature", check_float("temperature", self.temperature, min=0))
        set_(self, "top_k", check_int("top_k", self.top_k, min=0))
        set_(self, "top_p", check_float("top_p", self.top_p, min=0, min_inclusive=False, max=1))
        set_(
            self,
            "stop_token_ids",
            tuple(check_int_list("stop_token_ids", self.stop_token_ids, min=0)),
        )
        if self.seed is not None:
            set_(self, "seed", check_int("seed", self.seed, min=0))
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos is {self.ignore_eos!r}: expected True or False")
        set_(self, "n", check_int("n", self.n, min=1))
        for name in ("logprobs", "prompt_logprobs"):
            if getattr(self, name) is not None:
                set_(self, name, check_int(name, getattr(self, name), min=0, max=MAX_LOGPROBS))
        set_(
            self,
            "presence_penalty",
            check_float("presence_penalty", self.presence_penalty, min=-2, max=2),
        )
        set_(
            self,
            "frequency_penalty",
            check_float("frequency_penalty", self.frequency_penalty, min=-2, max=2),
        )
        set_(
            self,
            "repetition_penalty",
            check_float(
                "repetition_penalty", self.repetition_penalty, min=0, min_inclusive=False, max=2
            ),
        )
        set_(self, "min_p", check_float("min_p", self.min_p, min=0, max=1))
        set_(self, "logit_bias", _check_logit_bias(self.logit_bias))
        if self.structured_outputs is not None:
            set_(
                self,
                "structured_outputs",
                StructuredOutputsParams.from_dict(self.structured_outputs),
            )

    @property
    def penalized(self) -> bool:
        return bool(
            self.presence_penalty
            or self.frequency_penalty
            or self.repetition_penalty != 1.0
            or self.logit_bias
        )

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW


def _check_logit_bias(bias) -> tuple[tuple[int, float], ...]:
    """{token id: bias} or (id, bias) pairs as sorted pairs; each bias in [-100, 100] as
    OpenAI's."""
    pairs = bias.items() if isinstance(bias, dict) else bias
    try:
        pairs = [(k, v) for k, v in pairs]
    except (TypeError, ValueError):
        raise ValueError(
            f"logit_bias is {bias!r}: expected a dict {{token_id: bias}}"
        ) from None
    out = {}
    for k, v in pairs:
        tid = check_int(
            "logit_bias key", int(k) if isinstance(k, str) and k.isdigit() else k, min=0
        )
        out[tid] = check_float(f"logit_bias[{tid}]", v, min=-100, max=100)
    return tuple(sorted(out.items()))


def apply_penalties(
    logits: torch.Tensor,
    params: list[SamplingParams],
    histories: list[tuple[list[int], list[int]]],
) -> torch.Tensor:
    """logits [M, V] (float32, changed in place) after logit_bias and the three penalties, row
    by row.

    histories[i] = (prompt ids, output ids) of row i. The same arithmetic as vLLM's
    apply_penalties and transformers' RepetitionPenaltyLogitsProcessor (which sees prompt and
    output alike).
    """
    V = logits.shape[1]
    for i, (sp, (prompt, output)) in enumerate(zip(params, histories)):
        if not sp.penalized:
            continue
        row = logits[i]
        for tid, b in sp.logit_bias:
            if tid >= V:
                raise ValueError(
                    f"logit_bias names token id {tid}: expected ids < {V} (the vocabulary)"
                )
            row[tid] += b
        if sp.repetition_penalty != 1.0:
            seen = torch.tensor(
                sorted(set(prompt) | set(output)), dtype=torch.long, device=row.device
            )
            vals = row[seen]
            row[seen] = torch.where(
                vals > 0, vals / sp.repetition_penalty, vals * sp.repetition_penalty
            )
        if output and (sp.frequency_penalty or sp.presence_penalty):
            counts = torch.bincount(torch.tensor(output, device=row.device), minlength=V)[
                :V
            ].to(row.dtype)
            row -= sp.frequency_penalty * counts + sp.presence_penalty * (counts > 0).to(
                row.dtype
            )
    return logits


def apply_min_p(logits: torch.Tensor, min_p: list[float]) -> torch.Tensor:
    """logits [M, V] with tokens whose probability is below min_p[i] times row i's largest set
    to -inf."""
    probs = logits.softmax(dim=-1)
    threshold = (
        probs.max(dim=-1, keepdim=True).values
        * torch.tensor(min_p, device=logits.device)[:, None]
    )
    return logits.masked_fill(probs < threshold, float("-inf"))


def token_logprobs(
    logits: torch.Tensor, token_ids: list[int], k: list[int]
) -> list[tuple[float, list]]:
    """For row i of logits [M, V]: (logprob of token_ids[i], [(id, logprob)] of its k[i] most
    likely)."""
    lp = logits.float().log_softmax(dim=-1)  # [M, V]
    kmax = max(k, default=0)
    top_v, top_i = lp.topk(kmax, dim=-1) if kmax else (None, None)
    chosen = lp.gather(1, torch.tensor(token_ids, device=lp.device)[:, None])[:, 0].tolist()
    out = []
    for i, c in enumerate(chosen):
        top = list(zip(top_i[i, : k[i]].tolist(), top_v[i, : k[i]].tolist())) if k[i] else []
        out.append((c, top))
    return out


def step_seed(seed: int, step: int) -> int:
    """One generator seed per (request seed, step): a multiplicative hash, so nearby seeds do
    not overlap."""
    return (seed * 0x9E3779B97F4A7C15 + step * 0xBF58476D1CE4E5B9) % (1 << 63)


def apply_top_k_top_p(
    logits: torch.Tensor, top_k: list[int], top_p: list[float]
) -> torch.Tensor:
    """Logits [M, V] with every token outside row i's top-k and top-p set to -inf.

    vLLM's order (vllm/v1/sample/ops/topk_topp_sampler.py, apply_top_k_top_p_pytorch, commit
    01fa3fe): top-k first, keeping every token tied with the k-th largest logit (k = 0: all);
    then top-p on the softmax of what top-k kept, renormalised: a survivor stays if the
    probability of the survivors ranked above it is below p (p = 1: all stay), so the most
    likely token always stays. One sort of each row serves both.
    """
    M, V = logits.shape
    k = torch.tensor([t if 0 < t < V else V for t in top_k], device=logits.device)  # [M]
    p = torch.tensor(top_p, dtype=torch.float32, device=logits.device)  # [M]
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # [M, V]
    kth = sorted_logits.gather(-1, (k - 1)[:, None])  # [M, 1] the k-th largest logit
    in_top_k = sorted_logits >= kth  # [M, V] by value, not rank: a tie with the k-th stays
    probs = sorted_logits.float().masked_fill(~in_top_k, float("-inf")).softmax(dim=-1)
    mass_above = probs.cumsum(dim=-1) - probs  # [M, V] mass of the better-ranked survivors
    # p = 1 keeps every survivor: in float32 the cumsum over a large vocabulary can reach 1.0
    # before its last tokens
    keep_sorted = in_top_k & ((mass_above < p[:, None]) | (p[:, None] >= 1.0))
    keep = torch.zeros_like(keep_sorted).scatter(
        -1, order, keep_sorted
    )  # back to vocabulary order
    return logits.masked_fill(~keep, float("-inf"))


def sample(
    logits: torch.Tensor,
    params: list[SamplingParams],
    seeds: list[int],
    steps: list[int],
    histories: list[tuple[list[int], list[int]]] | None = None,
) -> list[int]:
    """One token per row of logits [M, V]; row i follows params[i], drawing with (seeds[i],
    steps[i]).

    histories[i]: (prompt ids, output ids) of row i's request, needed only for penalties.
    """
    M = logits.shape[0]
    if not len(params) == len(seeds) == len(steps) == M:
        raise ValueError(
            f"{M} rows of logits but {len(params)} params, {len(seeds)} seeds, {len(steps)} "
            "steps"
        )
    check_logits(logits)
    if any(sp.penalized for sp in params):
        if histories is None or len(histories) != M:
            raise ValueError(
                "penalties or logit_bias need histories: one (prompt ids, output ids) per row"
            )
        logits = apply_penalties(logits.float().clone(), params, histories)
    tokens = logits.argmax(
        dim=-1
    ).tolist()  # greedy rows are done; sampled rows are overwritten below
    rows = [i for i, sp in enumerate(params) if not sp.greedy]
    if not rows:
        return tokens
    # Subtract each row's max before dividing: the best token scores exactly 0 and the others -x
    # / T, which for a tiny T is a large negative number (or -inf), never NaN; softmax then
    # tends to the argmax.
    picked = logits[rows].float()
    picked = picked - picked.max(dim=-1, keepdim=True).values
    scaled = (
        picked
        / torch.tensor([params[i].temperature for i in rows], device=logits.device)[:, None]
    )
    if any(params[i].min_p > 0 for i in rows):
        scaled = apply_min_p(scaled, [params[i].min_p for i in rows])
    # The filter sorts each row's whole vocabulary, so only rows that set top-k or top-p go
    # through it; on the others it would change nothing (vLLM 0.34.0's apply_top_k_top_p, in
    # vllm/v1/sample/ops/topk_topp_sampler.py, returns the logits when given no k and no p).
    # It works row by row, so every row gets the same tokens either way.
    filtered = [j for j, i in enumerate(rows) if uses_top_k_top_p(params[i])]
    if filtered:
        scaled[filtered] = apply_top_k_top_p(
            scaled[filtered],
            [params[rows[j]].top_k for j in filtered],
            [params[rows[j]].top_p for j in filtered],
        )
    probs = scaled.softmax(
        dim=-1
    ).cpu()  # [m, V]; drawing on the CPU gives the same tokens on every device
    cdf = probs.cumsum(dim=-1)  # [m, V]
    # one generator per row (its seed and step), then one search for every row
    u = torch.stack(
        [
            torch.rand(
                (), generator=torch.Generator().manual_seed(step_seed(seeds[i], steps[i]))
            )
            for i in rows
        ]
    )  # [m]
    u = u * cdf[:, -1]  # scale by the total: cumsum may end a hair below 1
    drawn = torch.searchsorted(cdf, u[:, None], right=True)[:, 0].clamp(max=cdf.shape[1] - 1)
    for j, (i, token) in enumerate(zip(rows, drawn.tolist())):
        while (
            probs[j, token] == 0
        ):  # u can only land on a zero-probability token at a float tie: step back
            token -= 1
        tokens[i] = token
    return tokens


def uses_top_k_top_p(sp: SamplingParams) -> bool:
    """Whether top-k or top-p removes anything from a row (k = 0 and p = 1 keep every token)."""
    return sp.top_k > 0 or sp.top_p < 1.0


def check_logits(logits: torch.Tensor) -> None:
    """Raise if a row has NaN or +inf, or nothing but -inf: argmax and softmax would pick a
    token at random."""
    # One pass whether or not a mask put -inf in the rows: a row's max is finite exactly when
    # the row is fine (amax propagates NaN, +inf is the max, a row of only -inf has max -inf).
    row_max = logits.amax(dim=-1)  # [M]
    if bool(torch.isfinite(row_max).all()):
        return
    row = int((~torch.isfinite(row_max)).nonzero()[0])
    raise ValueError(
        f"logits row {row} holds NaN, +inf or only -inf: expected finite scores from the "
        "model "
        "(check the checkpoint's weights and config)"
    )
