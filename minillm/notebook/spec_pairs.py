"""notebook/spec_pairs.py — chapter 9's draft of real cost with proposals of known quality.

The bench model's truncated draft runs all its forwards (`TimedOracleProposer`), and the oracle
supplies the proposals, right with probability alpha. Each speculative run is timed against a
plain run made just before it (a pair); rounds go over every (alpha, k) in turn, so that a busy
moment of the machine lands on one pair of each, not on every pair of one.

Costs are in decodes of the pair's own plain run, with the chapter's one definition:
c(k) is the median target forward that verifies k proposals (k + 1 query tokens at batch 1)
over the plain run's median decode; d is the draft's mean forward over the same decode; n is
the draft forwards per verify. A run's speed over plain is then about E / (c + n d), and
E / c is the bound a free draft would reach.
"""

from __future__ import annotations

import statistics

import matplotlib.pyplot as plt

from minillm.bench.spec import run
from minillm.spec_decode.oracle import OracleProposer, TimedOracleProposer


def pair_costs(plain: dict, r: dict, k: int) -> dict:
    """One pair's speed over plain and its costs, in decodes of its plain run (batch 1)."""
    dec_ms = plain["forward_ms"]["1"]
    drafts, verifies = r["draft_forwards"], r["forwards"]["verify"]["count"]
    return dict(
        speedup=plain["seconds"] / r["seconds"],
        plain_seconds=plain["seconds"],
        E=r["mean_accepted_length"],
        c=r["forward_ms"][str(k + 1)] / dec_ms,
        d=1e3 * drafts["seconds"] / drafts["count"] / dec_ms,
        n=drafts["count"] / verifies,
    )


def draft_pairs(model, prompts, truth, spec, alphas, ks, rounds: int, max_tokens: int):
    """{(alpha, k): [pair_costs per round]}; every run must give plain decoding's tokens."""
    want = [truth[tuple(p)] for p in prompts]
    out = {(a, k): [] for a in alphas for k in ks}
    for _ in range(rounds):
        for a in alphas:
            for k in ks:
                plain = run(model, prompts, max_tokens, 1, None)
                r = run(
                    model,
                    prompts,
                    max_tokens,
                    1,
                    dict(spec, num_speculative_tokens=k),
                    wrap_proposer=lambda d, a=a: TimedOracleProposer(
                        d, OracleProposer(truth, a, seed=1)
                    ),
                )
                if r["tokens"] != want or plain["tokens"] != want:
                    raise AssertionError(f"alpha {a}, k {k}: tokens differ from plain decoding")
                out[a, k].append(pair_costs(plain, r, k))
    return out


def summary(pairs: list[dict]) -> dict:
    """The medians of c, d and n over the pairs, the speed they predict, and every pair's."""
    med = {x: statistics.median(p[x] for p in pairs) for x in ("c", "d", "n", "E")}
    speedups = [p["speedup"] for p in pairs]
    return dict(
        med,
        predicted=med["E"] / (med["c"] + med["n"] * med["d"]),
        free=med["E"] / med["c"],  # the same verifies with a draft that costs nothing
        speedup=statistics.median(speedups),
        lo=min(speedups),
        hi=max(speedups),
        faster=sum(s > 1 for s in speedups),
    )


def print_pairs(results: dict) -> dict:
    print(
        "alpha | k | tokens/verify | c(k) |    d |    n | E/(c+nd) | E/c  | "
        "measured (every pair)"
    )
    table = {}
    for (a, k), pairs in results.items():
        s = table[a, k] = summary(pairs)
        print(
            f"{a:5.1f} | {k} | {s['E']:13.2f} | {s['c']:4.2f} | {s['d']:4.2f} | "
            f"{s['n']:4.2f} | {s['predicted']:7.2f}x | {s['free']:4.2f}x | "
            f"{s['speedup']:.2f}x ({s['lo']:.2f} to {s['hi']:.2f}, faster in {s['faster']} "
            f"of {len(pairs)})"
        )
    plains = [p["plain_seconds"] for pairs in results.values() for p in pairs]
    med = statistics.median(plains)
    print(
        f"the {len(plains)} plain runs: {min(plains) / med:.2f}x to {max(plains) / med:.2f}x "
        f"their median, {med:.2f} s"
    )
    return table


def plot_pairs(results: dict, table: dict) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    for j, a in enumerate(sorted({a for a, _ in results})):
        ks = sorted(k for b, k in results if b == a)
        meds = [table[a, k]["speedup"] for k in ks]
        err = [
            [m - table[a, k]["lo"] for m, k in zip(meds, ks)],
            [table[a, k]["hi"] - m for m, k in zip(meds, ks)],
        ]
        ax.errorbar(
            ks,
            meds,
            yerr=err,
            fmt="o-",
            color=f"C{j}",
            capsize=3,
            label=f"alpha = {a}: measured (median pair, bars: every pair)",
        )
        ax.plot(
            ks,
            [table[a, k]["predicted"] for k in ks],
            "x--",
            color=f"C{j}",
            label=f"alpha = {a}: E / (c + n d)",
        )
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(sorted({k for _, k in results}))
    ax.set_xlabel("k (proposals per verify)")
    ax.set_ylabel("speed over plain decoding (x)")
    ax.set_title("2-layer draft's forwards, the oracle's proposals (batch 1)", fontsize=10)
    ax.legend(fontsize=7)
    plt.tight_layout()
    plt.show()
