"""kv_timing.py — chapter 2's timing of one generation step, without and with the KV cache.

Per sequence length L it times the step that produces token L two ways: a forward over all L
tokens (no cache, chapter 1's loop) and one decode step against a cache holding L - 1 tokens.
`TimedAttention` splits each step into the time inside the attention backend and the rest. Each
round also measures the machine's streaming read bandwidth, so that the chapter can set the
cached step's time beside the time it takes to read the weights once. The chapter prints the
tables and figures from here; the harness lives here so that section 7 reads as a measurement.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import torch

from minillm.bench.floor import decode_weight_bytes, stream_bandwidth
from minillm.kv_cache import KVCache, forward_cached
from minillm.model import DenseAttention, Transformer


class TimedAttention:
    """Wraps an attention backend and sums the seconds its `attend` calls take: the step's own
    attention, timed inside the step. The rest (`length`, `advance`) is the wrapped one's."""

    def __init__(self, inner):
        self.inner, self.seconds = inner, 0.0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def attend(self, layer, q, k, v, scale):
        start = time.perf_counter()
        out = self.inner.attend(layer, q, k, v, scale)
        self.seconds += time.perf_counter() - start
        return out


def timed_ms(timed: TimedAttention, fn, *args) -> tuple[float, float]:
    """Run fn(*args) once: its ms, and the ms of it spent in timed's attend."""
    timed.seconds = 0.0
    start = time.perf_counter()
    fn(*args)
    return 1000 * (time.perf_counter() - start), 1000 * timed.seconds


def sweep(model: Transformer, lengths: list[int], reps: int, generator: torch.Generator):
    """Per length L, (ms, attention ms) of the fastest of `reps` repetitions: [recompute,
    cached].

    A repetition runs the recompute at every L, then two untimed decode steps at every L (so
    that each timed decode step follows decode steps, as in a decode loop), then the timed
    decode step at every L: a slow spell of the machine slows every length and both methods
    alike. One more repetition runs first and is dropped. The decode step rewinds
    `cache.length` to L - 1 each time: the same step again, over the same buffers.
    """
    vocab = model.cfg.vocab_size
    seqs = [torch.randint(0, vocab, (1, L), generator=generator) for L in lengths]  # [1, L]
    steps = []  # per L: chapter 1's backend (no cache); a cache of L - 1 tokens, its wrapper
    for L, seq in zip(lengths, seqs):
        cache = KVCache.for_model(model, max_len=L)
        forward_cached(model, cache, seq[:, :-1])  # prefill L - 1 tokens
        steps.append((TimedAttention(DenseAttention()), cache, TimedAttention(cache)))
    runs = [([], []) for _ in lengths]  # per L: recompute, cached step
    for _ in range(1 + reps):
        for L, seq, (dense, _, _), run in zip(lengths, seqs, steps, runs):
            run[0].append(timed_ms(dense, model, seq, torch.arange(L), dense, [-1]))
        for L, seq, (_, cache, _) in 2 * list(zip(lengths, seqs, steps)):
            cache.length = L - 1
            forward_cached(model, cache, seq[:, -1:])
        for L, seq, (_, cache, timed), run in zip(lengths, seqs, steps, runs):
            cache.length = L - 1  # rewind: time the same decode step again
            run[1].append(timed_ms(timed, forward_cached, model, timed, seq[:, -1:]))
    # the first repetition dropped; per L and method the least-disturbed one: (total, attention)
    return [[min(run[k][1:]) for run in runs] for k in range(2)]


@dataclass
class StepTimes:
    """One model's rounds: per round a sweep and the streaming read bandwidth (bytes/s)."""

    name: str
    model: Transformer
    lengths: list[int]
    rounds: list = field(default_factory=list)  # per round: [recompute, cached] per L
    bandwidth: list[float] = field(default_factory=list)  # per round

    @property
    def bandwidth_gb(self) -> list[float]:
        return [b / 1e9 for b in self.bandwidth]

    def total(
        self, k: int, i: int
    ) -> list[float]:  # method k (0 recompute, 1 cached), L index i
        return [r[k][i][0] for r in self.rounds]

    def attention(self, k: int, i: int) -> list[float]:
        return [r[k][i][1] for r in self.rounds]

    def rest(self, k: int, i: int) -> list[float]:
        return [t - a for t, a in zip(self.total(k, i), self.attention(k, i))]

    def per_round(self, k: int, part: str) -> list[list[float]]:
        """Per round, the part ("total", "attention" or "rest") of method k at every L."""
        cols = [getattr(self, part)(k, i) for i in range(len(self.lengths))]
        return [list(round_) for round_ in zip(*cols)]


def time_steps(
    name: str, model: Transformer, lengths: list[int], reps: int, rounds: int, seed: int = 0
) -> StepTimes:
    """`rounds` rounds of `sweep`, each after a streaming-bandwidth measurement."""
    g = torch.Generator().manual_seed(seed)
    out = StepTimes(name, model, lengths)
    for _ in range(rounds):
        out.bandwidth.append(stream_bandwidth())
        out.rounds.append(sweep(model, lengths, reps, g))
    return out


def span(values, width: int = 4, digits: int = 2) -> str:
    """Lowest to highest over the rounds."""
    return f"{min(values):{width}.{digits}f}-{max(values):{width}.{digits}f}"


def slope(xs, ys) -> float:
    """Least-squares change of ys per unit of xs: the trend over all lengths."""
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    num = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys))
    return num / sum((x - mean_x) ** 2 for x in xs)


def weight_split(model: Transformer) -> tuple[int, int]:
    """(weights, of them the output layer): a tied output layer counted once."""
    n = sum(p.numel() for p in model.parameters())
    return n, model.lm_head.weight.numel()


def print_table(t: StepTimes) -> None:
    """One row per L: the work ratio, both steps' ms, the speed-up, attention's share."""
    n, head = weight_split(t.model)
    cfg = t.model.cfg
    print(
        f"{t.name}: {cfg.num_hidden_layers} layers, hidden size {cfg.hidden_size}; "
        f"{n:,} weights, {head / n:.1%} of them the output layer"
    )
    print(
        f"  {'L':>5s}  {'work L:1':>8s}  {'without cache':>16s}  {'with cache':>12s}  "
        f"{'speed-up':>9s}  attention, % of without"
    )
    for i, L in enumerate(t.lengths):
        without, with_ = t.total(0, i), t.total(1, i)
        gain = [a / b for a, b in zip(without, with_)]
        share = [100 * a / b for a, b in zip(t.attention(0, i), without)]
        ms = f"{span(without, 1) + ' ms':>16s}  {span(with_, 1) + ' ms':>12s}"
        print(
            f"  {L:5,d}  {L:8,d}  {ms}  {span(gain, 1, 1) + 'x':>9s}  {span(share, 1, 0):>5s}"
        )


def trends(t: StepTimes) -> dict[str, list[float]]:
    """Per round: how each part grows with L, and the cached step's rest (mean over L)."""
    L = t.lengths
    return {
        # ms per 1,000 tokens of history
        "cached attention": [1000 * slope(L, ys) for ys in t.per_round(1, "attention")],
        "cached rest": [1000 * slope(L, ys) for ys in t.per_round(1, "rest")],
        # µs per token: what one more token costs a recompute outside attention
        "recompute rest": [1000 * slope(L, ys) for ys in t.per_round(0, "rest")],
        "cached rest ms": [sum(ys) / len(ys) for ys in t.per_round(1, "rest")],
    }


def print_trends(t: StepTimes) -> None:
    tr = trends(t)
    print(
        f"{t.name}: with cache, per 1,000 more tokens: attention "
        f"{min(tr['cached attention']):+.2f} to {max(tr['cached attention']):+.2f} ms, "
        f"the rest {min(tr['cached rest']):+.2f} to {max(tr['cached rest']):+.2f} ms"
    )
    print(
        f"{' ' * len(t.name)}  without cache, the rest: "
        f"{span(tr['recompute rest'], 1, 1 if min(tr['recompute rest']) < 100 else 0)} µs "
        "more per token"
    )


def medians(t: StepTimes, k: int, part: str = "total") -> list[float]:
    """Per L, the median over the rounds of method k's part."""
    cols = [sorted(getattr(t, part)(k, i)) for i in range(len(t.lengths))]
    return [c[len(c) // 2] for c in cols]


def plot_totals(timings: list[StepTimes]) -> None:
    """Time per generated token against L, both methods, every model: log scale."""
    plt.figure(figsize=(7, 3.8))
    for t in timings:
        plt.plot(t.lengths, medians(t, 0), "o-", label=f"{t.name}, without cache")
        plt.plot(t.lengths, medians(t, 1), "o--", label=f"{t.name}, with cache")
    plt.xlabel("sequence length L (tokens)")
    plt.ylabel(f"ms per generated token (median of {len(timings[0].rounds)} rounds)")
    plt.yscale("log")  # the cached step's growth is visible next to the recompute's
    plt.title("Time per generated token: the recompute grows with L, the cached step barely")
    plt.legend()
    plt.grid(alpha=0.3)
    plt.tight_layout()
    plt.show()


def plot_recompute_split(timings: list[StepTimes]) -> None:
    """Per model, the recompute's time split into attention and the rest, with the cached step's
    total as a line: what the cache saves, and which part of the recompute it is."""
    fig, axes = plt.subplots(1, len(timings), figsize=(4.2 * len(timings), 3.4))
    for ax, t in zip(axes, timings):
        x = range(len(t.lengths))
        attn, rest = medians(t, 0, "attention"), medians(t, 0, "rest")
        ax.bar(x, rest, color="tab:gray", label="the rest")
        ax.bar(x, attn, bottom=rest, color="tab:orange", label="attention")
        cached = sorted(medians(t, 1))[len(t.lengths) // 2]
        ax.axhline(cached, color="tab:blue", ls="--", label="with cache (median)")
        ax.set_xticks(list(x), [f"{L:,}" for L in t.lengths])
        ax.set_xlabel("sequence length L (tokens)")
        ax.set_ylabel("ms per generated token")
        ax.set_title(f"{t.name}: the recompute")
        ax.legend(fontsize=8)
    fig.suptitle("What a recompute spends its time on")
    fig.tight_layout()
    plt.show()


def print_floor(t: StepTimes) -> None:
    """The cached step's rest beside the time to read its weights once at the measured
    bandwidth; and the L at which a recompute's extra tokens cost as much as that rest."""
    tr = trends(t)
    weight_bytes = decode_weight_bytes(t.model)
    floor = [1000 * weight_bytes / b for b in t.bandwidth]  # ms per round
    ratio = [r / f for r, f in zip(tr["cached rest ms"], floor)]
    even = [1000 * r / s for r, s in zip(tr["cached rest ms"], tr["recompute rest"])]
    print(
        f"{t.name}: {weight_bytes / 1e6:,.1f} MB of weights / {span(t.bandwidth_gb, 1, 1)} GB/s"
        f" = {span(floor, 1)} ms; with cache the rest takes {span(tr['cached rest ms'], 1)} ms"
        f" ({span(ratio, 1, 2)}x that)"
    )
    print(
        f"{' ' * len(t.name)}  a recompute's rest grows by that much at L = "
        f"{min(even):,.0f}-{max(even):,.0f}"
    )


def print_rate(t: StepTimes) -> None:
    """The operations per second a recompute's extra tokens run at, counting only the layers'
    weights (2 per weight per token; attention and the rest of the layer math not counted, so a
    lower bound), and that rate over the measured bandwidth: operations per byte read."""
    n, head = weight_split(t.model)
    ops = 2 * (n - head)  # per token: every layer weight once; the embedding is a lookup
    rate = [ops / (s * 1e-6) for s in trends(t)["recompute rest"]]  # per round, operations/s
    per_byte = [r / b for r, b in zip(rate, t.bandwidth)]
    print(
        f"{t.name}: a recompute's extra token: 2 x {n - head:,} layer weights = "
        f"{ops / 1e6:,.1f} M operations, at {span([r / 1e9 for r in rate], 1, 0)} GFLOP/s; "
        f"{span(per_byte, 1, 0)} operations per byte read"
    )
