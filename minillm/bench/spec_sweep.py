"""bench/spec_sweep.py — the verify side of speculation alone: an oracle proposer swept over
alpha and k, against the speedup the expected-tokens formula predicts.

    rows = sweep(model, alphas=(0.0, 0.8, 1.0), ks=(2, 4), batch_sizes=(1, 8), max_tokens=12)

For each batch size B, B prompts run greedily without speculation first (their outputs are the
oracle's continuations); then `repeats` times per (alpha, k) with spec_decode/oracle.py's
OracleProposer, which proposes those continuations for free, each token corrupted with
probability 1 - alpha. Every run must give the plain run's tokens, or the sweep fails. Each
speculative run is timed against a plain run made just before it, so that a machine whose load
drifts during the sweep still compares like with like; a row's speedup is the median pair's, and
it keeps every pair's. The predicted speedup is expected_tokens(alpha, k) / c(k), where c(k) is
one value per (B, k): each row's median target forward with k + 1 query tokens per request over
the median decode (B query tokens) of the plain run paired with it, the median over the rows of
every alpha (`cost_ratios`, `set_cost`).
"""

from __future__ import annotations

import random
import statistics

from minillm.bench.forward_split import PARTS
from minillm.bench.spec import run
from minillm.spec_decode.oracle import OracleProposer, expected_tokens, expected_tokens_cut

PROMPT_LEN = 32  # longer than any verify of the sweep, so a prefill never files as one


def prompts_for(batch_size: int, vocab_size: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab_size) for _ in range(PROMPT_LEN)] for _ in range(batch_size)]


def sweep(
    model,
    alphas,
    ks,
    batch_sizes=(1, 8),
    max_tokens: int = 12,
    seed: int = 0,
    draft_k: int | None = None,
    repeats: int = 1,
) -> list[dict]:
    """One row per (batch size, alpha, k): measured and predicted speedups over plain decoding.

    draft_k: also time the target as its own draft at this k (every proposal accepted, like
    the oracle at alpha = 1, but each proposal costs a target forward): a row with alpha None.
    repeats: pairs of runs (plain, then speculative) per row; the row keeps every pair's
    speedup and the median pair's counts and forwards (the oracle's seed is the same in every
    pair, so are its counts).
    """
    vocab_size = model.cfg.vocab_size
    run(model, prompts_for(2, vocab_size, seed + 99), 4, 2, None)  # warm-up: kernel choice

    def pairs(prompts, b, spec, make_proposer, plain_tokens, what):
        out = []
        for _ in range(repeats):
            before = run(model, prompts, max_tokens, b, None, split=True)
            r = run(model, prompts, max_tokens, b, spec, proposer=make_proposer(), split=True)
            if r["tokens"] != plain_tokens:
                raise AssertionError(f"{what}, batch {b}: tokens differ")
            out.append((before, r))
        return out

    rows = []
    for b in batch_sizes:
        prompts = prompts_for(b, vocab_size, seed + b)
        plain = run(model, prompts, max_tokens, b, None)
        continuations = {tuple(p): t for p, t in zip(prompts, plain["tokens"])}
        spec = {"method": "ngram", "num_speculative_tokens": 1}  # its proposer is replaced
        for k in ks:
            spec = dict(spec, num_speculative_tokens=k)
            these = []
            for alpha in sorted(alphas, reverse=True):
                runs = pairs(
                    prompts,
                    b,
                    spec,
                    lambda a=alpha, k=k, c=continuations: OracleProposer(c, a, seed=seed + k),
                    plain["tokens"],
                    f"alpha {alpha}, k {k}",
                )
                these.append(row(b, alpha, k, runs))
            set_cost(these, b, k)
            rows += these
        if draft_k is not None:
            spec = {"method": "draft_model", "num_speculative_tokens": draft_k, "model": model}
            runs = pairs(prompts, b, spec, lambda: None, plain["tokens"], "the target as draft")
            rows.append(row(b, None, draft_k, runs))
    return rows


def forward_seconds(r: dict) -> float:
    return sum(v["seconds"] for v in r["forwards"].values())


def row(b, alpha, k, runs) -> dict:
    """runs: [(plain, speculative)] pairs. cost_ratio and predicted_speedup stay None until
    `set_cost` fills them from every row of the same (batch, k)."""
    speedups = [p["seconds"] / r["seconds"] for p, r in runs]
    plain, r = sorted(runs, key=lambda pr: pr[0]["seconds"] / pr[1]["seconds"])[len(runs) // 2]
    n_after = round(r["output_tokens"] / b) - 1  # each request's tokens after the prefill's
    return dict(
        batch_size=b,
        alpha=alpha,
        k=k,
        acceptance_rate=r["acceptance_rate"],
        tokens_per_verify=r["mean_accepted_length"],
        # the formula's tokens per verify, without and with max_tokens' cut of the last verifies
        expected_tokens=None if alpha is None else expected_tokens(alpha, k),
        expected_tokens_cut=None if alpha is None else expected_tokens_cut(alpha, k, n_after),
        forwards_per_token=r["forwards_per_token"],
        cost_ratio=None,
        predicted_speedup=None,
        speedup=statistics.median(speedups),
        speedups=speedups,  # every pair's, in run order
        # every pair's target forwards alone: the time outside them (scheduling, sampling) out
        forward_speedups=[forward_seconds(p) / forward_seconds(r) for p, r in runs],
        seconds=r["seconds"],
        plain_seconds=plain["seconds"],
        all_plain_seconds=[p["seconds"] for p, _ in runs],
        # the median pair's target forwards by kind (count, seconds), median ms by query tokens
        forwards=r["forwards"],
        plain_forwards=plain["forwards"],
        draft_forwards=r["draft_forwards"],
        forward_ms=r["forward_ms"],
        plain_forward_ms=plain["forward_ms"],
        # the same forwards' projections and attention, median ms by query tokens
        forward_parts=r["forward_parts"],
        plain_forward_parts=plain["forward_parts"],
    )


def cost_ratios(rows: list[dict], batch_size: int, k: int) -> list[float]:
    """c(k) from every oracle row of (batch_size, k), whatever its alpha (a verify's cost does
    not depend on what it accepts): the median pair's median forward of k + 1 query tokens per
    request over the median decode of the plain run paired with it. One value per row, so their
    spread is the scatter of the measurement."""
    return [
        r["forward_ms"][str(batch_size * (k + 1))] / r["plain_forward_ms"][str(batch_size)]
        for r in rows
        if r["batch_size"] == batch_size
        and r["k"] == k
        and r["alpha"] is not None  # the target as its own draft: not an oracle row
        and str(batch_size * (k + 1)) in r["forward_ms"]
    ]


def cost_parts(rows: list[dict], batch_size: int, k: int) -> list[tuple[float, ...]]:
    """`cost_ratios` split: per oracle row of (batch_size, k), its full verify's median forward,
    projections and attention, then its paired plain run's median decode's, all in ms."""
    v, d = str(batch_size * (k + 1)), str(batch_size)
    return [
        (
            r["forward_ms"][v],
            *(r["forward_parts"][v][p] for p in PARTS),
            r["plain_forward_ms"][d],
            *(r["plain_forward_parts"][d][p] for p in PARTS),
        )
        for r in rows
        if r["batch_size"] == batch_size
        and r["k"] == k
        and r["alpha"] is not None
        and v in r["forward_ms"]
    ]


def set_cost(rows: list[dict], batch_size: int, k: int) -> None:
    """Give every oracle row of (batch_size, k) the same c(k), the median of `cost_ratios`, and
    the speedup E(alpha, k) / c(k) it predicts."""
    cost = statistics.median(cost_ratios(rows, batch_size, k))
    for r in rows:
        if r["batch_size"] == batch_size and r["k"] == k and r["alpha"] is not None:
            r["cost_ratio"] = cost
            r["predicted_speedup"] = expected_tokens(r["alpha"], k) / cost


def break_even_alpha(k: int, cost_ratio: float) -> float | None:
    """The smallest alpha at which expected_tokens(alpha, k) reaches cost_ratio (bisection);
    None when even alpha = 1 (k + 1 tokens per verify) does not."""
    if expected_tokens(1.0, k) < cost_ratio:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens(mid, k) < cost_ratio else (lo, mid)
    return hi


def print_rows(rows: list[dict]) -> None:
    head = (
        f"{'batch':>5} | {'alpha':>5} | {'k':>2} | {'tokens/verify':>13} | {'tokens/E':>8} | "
        f"{'verify/decode':>13} | {'predicted':>9} | measured (every pair)"
    )
    print(head + "\n" + "-" * len(head))
    for r in rows:
        alpha = "draft" if r["alpha"] is None else f"{r['alpha']:.2f}"
        cost = "-" if r["cost_ratio"] is None else f"{r['cost_ratio']:.2f}x"
        pred = "-" if r["predicted_speedup"] is None else f"{r['predicted_speedup']:.2f}x"
        te = (
            "-"
            if r["alpha"] is None
            else f"{r['tokens_per_verify'] / r['expected_tokens']:.2f}"
        )
        print(
            f"{r['batch_size']:>5} | {alpha:>5} | {r['k']:>2} | "
            f"{r['tokens_per_verify']:>13.2f} | {te:>8} | {cost:>13} | {pred:>9} | "
            f"{r['speedup']:>7.2f}x ({min(r['speedups']):.2f} to {max(r['speedups']):.2f})"
        )
    for b in sorted({r["batch_size"] for r in rows}):
        ps = [s for r in rows if r["batch_size"] == b for s in r["all_plain_seconds"]]
        print(
            f"batch {b}: the {len(ps)} paired plain runs took {min(ps):.2f} to {max(ps):.2f} s "
            f"(median {statistics.median(ps):.2f} s, spread {max(ps) / min(ps) - 1:.0%})"
        )
