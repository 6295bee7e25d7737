"""notebook/spec_accounting.py — chapter 9's oracle sweep, rebuilt from its own forwards.

Each function prints one check of the saved sweep (`benchmarks/results/spec_oracle_cpu.json`):
the scatter of its plain runs, its counts against E(alpha, k), the batch's slowest request
(simulated, and measured), and each row's speedup rebuilt from the row's own forwards. The
chapter's appendix calls them; nothing here is timed again.
"""

from __future__ import annotations

import random
import statistics


def at(sweep: dict, b: int, alpha, k: int) -> dict:
    key = (b, alpha, k)
    return next(r for r in sweep["rows"] if (r["batch_size"], r["alpha"], r["k"]) == key)


def plain_scatter(sweep: dict) -> None:
    """Every row's plain run, timed just before its speculative run: the same work each time."""
    for b in sweep["workload"]["batch_sizes"]:
        ps = [s for r in sweep["rows"] if r["batch_size"] == b for s in r["all_plain_seconds"]]
        med, (q1, _, q3) = statistics.median(ps), statistics.quantiles(ps, n=4)
        print(
            f"batch {b}: the {len(ps)} plain runs took {min(ps):.2f} to {max(ps):.2f} s, "
            f"median {med:.2f} s: {min(ps) / med:.2f}x to {max(ps) / med:.2f}x the median, "
            f"the middle half {q1 / med:.2f}x to {q3 / med:.2f}x"
        )


def counts_against_e(sweep: dict) -> None:
    for b in sweep["workload"]["batch_sizes"]:  # tokens per verify over E, 0 < alpha < 1
        te = [
            r["tokens_per_verify"] / r["expected_tokens"]
            for r in sweep["rows"]
            if r["batch_size"] == b and r["alpha"] not in (None, 0.0, 1.0)
        ]
        print(f"batch {b}: tokens per verify over E from {min(te):.2f} to {max(te):.2f}")


def target_steps(rng, alpha: float, k: int, n: int) -> int:
    """The target forwards one request needs for n tokens: verifies of min(k, left - 1)
    proposals, a plain decode when one token is left."""
    left, steps = n, 0
    while left > 0:
        cap, j = min(k, left - 1), 0
        while j < cap and rng.random() < alpha:
            j += 1  # proposal j is right; the first wrong one ends the verify
        left, steps = left - (j + 1), steps + 1
    return steps


def slowest_request(sweep: dict, cases=((0.8, 8), (0.8, 4))) -> None:
    """The engine steps until a batch's last request is done: simulated (no clock) and
    measured (the sweep's batch-8 runs: the engine's steps against the average request's)."""
    sim = random.Random(0)
    n_left = sweep["workload"]["max_tokens"] - 1  # after the prefill's token
    for alpha, k in cases:
        batches = [[target_steps(sim, alpha, k, n_left) for _ in range(8)] for _ in range(2000)]
        mean = sum(sum(b) for b in batches) / (8 * len(batches))
        slowest = sum(max(b) for b in batches) / len(batches)
        print(
            f"simulated, alpha {alpha}, k {k}, 8 requests of {n_left} tokens: {mean:.1f} "
            f"target steps for the average request, {slowest:.1f} for the batch's slowest "
            f"({slowest / mean - 1:.0%} more)"
        )
    for alpha, k in cases:
        r = at(sweep, 8, alpha, k)
        steps = r["forwards"]["decode"]["count"] + r["forwards"]["verify"]["count"]
        mean = r["forwards_per_token"] * sweep["workload"]["max_tokens"] - 1
        print(
            f"measured, alpha {alpha}, k {k}: {mean:.1f} target steps for the average request, "
            f"{steps} for the batch ({steps / mean - 1:.0%} more)"
        )


def rebuild_rows(sweep: dict, c_of: dict) -> float:
    """Each row with 0 < alpha < 1, in decodes of its plain run: the prefill P, then the run's
    own decode and verify steps, each verify at the run's mean cost c-bar (its verifies of every
    size). Returns the largest gap between that and the measured speedup."""
    print(
        "forward-time accounting: (P + 63) / (P + decodes + verifies x c-bar), against measured"
    )
    gaps = []
    for r in sweep["rows"]:
        if r["alpha"] in (None, 0.0, 1.0):
            continue
        pf, f, b = r["plain_forwards"], r["forwards"], r["batch_size"]
        dec = pf["decode"]["seconds"] / pf["decode"]["count"]
        P = pf["prefill"]["seconds"] / dec
        c_bar = f["verify"]["seconds"] / f["verify"]["count"] / dec
        nd, nv = f["decode"]["count"], f["verify"]["count"]
        acc = (P + pf["decode"]["count"]) / (P + nd + nv * c_bar)
        gaps.append(abs(acc - r["speedup"]))
        print(
            f"  batch {b}, alpha {r['alpha']:.1f}, k {r['k']}: {nv} verifies at c-bar "
            f"{c_bar:.2f} (c(k) {c_of[b, r['k']]:.2f}), {nd} decode(s): {acc:.2f}x; measured "
            f"{r['speedup']:.2f}x ({min(r['speedups']):.2f} to {max(r['speedups']):.2f}); "
            f"E / c(k) {r['expected_tokens'] / c_of[b, r['k']]:.2f}x"
        )
    print(f"largest gap between that and the measured speedup: {max(gaps):.2f}x")
    return max(gaps)


def prefill_share(sweep: dict, c_of: dict) -> None:
    """Batch 1, alpha = 1, k = 8: plain decoding runs a prefill and 63 decodes, speculation the
    same prefill and 63 / 9 = 7 verifies of c(8) decodes each; P from the plain run's own
    forwards (its one 32-token forward over its median decode)."""
    r = at(sweep, 1, 1.0, 8)
    n_dec = sweep["workload"]["max_tokens"] - 1
    n_ver = n_dec / r["tokens_per_verify"]
    s, c = r["speedup"], c_of[1, 8]
    fm = r["plain_forward_ms"]
    p_fill = fm["32"] / fm["1"]
    print(
        f"batch 1, alpha = 1, k = 8: P = {p_fill:.2f} decodes (prefill {fm['32']:.1f} ms over "
        f"decode {fm['1']:.1f} ms); (P + {n_dec}) / (P + {n_ver:.0f} x {c:.2f}) = "
        f"{(p_fill + n_dec) / (p_fill + n_ver * c):.2f}x, E / c(8) = {9 / c:.2f}x, "
        f"measured {s:.2f}x"
    )
