"""padding_timing.py — chapter 5's timers: one forward padded vs packed, and its parts.

The chapter prints only the table; the timing code lives here, so that the section reads as a
measurement and the timed calls can use the runner's pieces without the chapter showing them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from minillm.model import DenseAttention, Transformer, rope_cos_sin
from minillm.paged import PagedKVCache, num_blocks_for
from minillm.runner import ModelRunner, build_batch

ROUNDS = 5  # every comparison in chapter 5: the fastest of 5 interleaved rounds


def interleaved_rounds(
    fns: dict[str, Callable[[], object]], rounds: int = ROUNDS
) -> dict[str, list[float]]:
    """Seconds: every call of each fn, round by round, every fn called once per round in turn,
    so that a busy moment of the machine slows them alike and round r's times pair up. One CPU
    thread, no autograd."""
    times = {name: [] for name in fns}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # steadier on a busy machine
    try:
        with torch.no_grad():
            for _ in range(rounds):
                for name, fn in fns.items():
                    start = time.perf_counter()
                    fn()
                    times[name].append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return times


def fastest_interleaved(
    fns: dict[str, Callable[[], object]], rounds: int = ROUNDS
) -> dict[str, float]:
    """Seconds: the fastest call of each fn over `rounds` interleaved rounds."""
    return {name: min(ts) for name, ts in interleaved_rounds(fns, rounds).items()}


class _NoAttention:
    """An attention backend that returns the queries: a layer without its attention."""

    def attend(self, layer, q, k, v, scale):
        return q


def padded_vs_packed(model: Transformer, lens: list[int], seed: int = 0) -> dict[str, float]:
    """Time one forward over requests of `lens` new tokens (nothing cached), padded to
    `[B, max_len]` through `Transformer.forward` and packed to `[N]` through `ModelRunner`, and
    their parts: one layer's attention, the same layer without it (random inputs of each
    layout's shapes), and the host work (the padded run's id check; the runner's `prepare`)."""
    cfg = model.cfg
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, cfg.vocab_size, (n,), generator=g).tolist() for n in lens]
    block_size = 16
    need = [num_blocks_for(n, block_size) for n in lens]
    runner = ModelRunner(model, PagedKVCache.for_model(model, sum(need), block_size))
    starts = [sum(need[:i]) for i in range(len(need))]
    batch = build_batch(
        [(p, 0, list(range(s, s + n)), True) for p, s, n in zip(prompts, starts, need)],
        block_size,
    )
    padded_ids = torch.tensor([p + [0] * (max(lens) - len(p)) for p in prompts])  # [B, L]
    B, L, N = len(lens), max(lens), sum(lens)
    H, KV, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.hd
    q_pad, k_pad, v_pad = (torch.randn(B, L, h, hd, generator=g) for h in (H, KV, KV))
    q_pk, k_pk, v_pk = (torch.randn(N, h, hd, generator=g) for h in (H, KV, KV))  # [N, h, hd]
    x_pad = torch.randn(B, L, cfg.hidden_size, generator=g)
    x_pk = torch.randn(N, cfg.hidden_size, generator=g)
    # RoPE's cos, sin as the forward makes them: [P, 1, hd]
    rope_pad, rope_pk = (
        tuple(t[:, None] for t in rope_cos_sin(pos, hd, cfg.rope_theta))
        for pos in (torch.arange(L), batch.positions)
    )
    # the padded run's backend: one causal_attention over [B, max_len]; the packed run's:
    # PagedAttention, writing the new K/V, then one call per request over its blocks
    dense, paged = DenseAttention(), runner.prepare(batch)
    layer, none, scale = model.layers[0], _NoAttention(), hd**-0.5
    return fastest_interleaved(
        {
            "forward padded": lambda: model(padded_ids, logits_indices=[-1]),
            "forward packed": lambda: runner.forward(batch),
            "attention padded": lambda: dense.attend(0, q_pad, k_pad, v_pad, scale),
            # the packed attention without its K/V store (timed apart): each request's gather
            # from its blocks, then its causal attention, as the padded run has no store
            "attention packed": lambda: paged.varlen(0, q_pk, scale),
            "store packed": lambda: runner.kv.store(0, paged.slot_mapping, k_pk, v_pk),
            "rest padded": lambda: layer(x_pad, *rope_pad, none),
            "rest packed": lambda: layer(x_pk, *rope_pk, none),
            # Transformer.forward without a backend checks every id, filler too
            "host padded": lambda: model.check_token_ids(padded_ids),
            "host packed": lambda: runner.prepare(batch),
        }
    )


def padding_table(times: dict[str, float], num_layers: int) -> str:
    """The table of `padded_vs_packed`'s times: padded ms, packed ms, padded / packed; then
    how much of each forward its timed parts add up to, and attention's estimated share."""
    rows = [
        ("forward", "forward"),
        ("one layer's attention (no K/V store)", "attention"),
        ("one layer without its attention", "rest"),
        ("host: id check (padded), prepare (packed)", "host"),
    ]
    lines = [f"{'':<46}{'padded':>10}{'packed':>10}{'padded/packed':>15}"]
    for label, key in rows:
        pad, pk = times[f"{key} padded"], times[f"{key} packed"]
        lines.append(f"{label:<46}{pad * 1e3:>7.1f} ms{pk * 1e3:>7.1f} ms{pad / pk:>14.1f}x")
    store = times["store packed"]
    label = "one layer's K/V store into the pool"
    lines.append(f"{label:<46}{'none':>10}{store * 1e3:>7.1f} ms")
    parts = {  # the parts timed alone, summed as the forward runs them
        k: num_layers * (times[f"attention {k}"] + times[f"rest {k}"]) + times[f"host {k}"]
        for k in ("padded", "packed")
    }
    parts["packed"] += num_layers * store
    sums = [parts[k] / times[f"forward {k}"] for k in ("padded", "packed")]
    label = f"the parts ({num_layers} layers + host), of the forward"
    lines.append(f"{label:<46}{sums[0]:>10.0%}{sums[1]:>10.0%}")
    share = [
        num_layers * times[f"attention {k}"] / times[f"forward {k}"]
        for k in ("padded", "packed")
    ]
    label = f"estimated: {num_layers} x attention / forward"
    lines.append(f"{label:<46}{share[0]:>10.0%}{share[1]:>10.0%}")
    return "\n".join(lines)
