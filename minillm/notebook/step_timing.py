"""step_timing.py — chapter 5's 64-request step: its host work, and a GPU bound for scale.

`step_items` draws a step of decodes and prompt chunks; `host_times` times the host work that
builds and checks its metadata (`build_batch`, the runner's `prepare`, and the attention
backend's constructor inside `prepare`); `gpu_bound` is the least time the same step could take
for Qwen3-0.6B on an H100, from the bytes it must read. The chapter prints the table.
"""

from __future__ import annotations

import random

from minillm.notebook.padding_timing import fastest_interleaved
from minillm.paged import num_blocks_for
from minillm.runner import BatchInput, ModelRunner, build_batch

# A GPU forward cannot beat reading every weight once and every request's cached K/V once.
# Qwen3-0.6B: 0.6e9 parameters, 2 bytes each in bfloat16; K/V per context token: 28 layers x
# (K and V) x 8 KV heads x 128 x 2 bytes. H100 SXM: 3.35e12 bytes/s at best (NVIDIA's spec).
WEIGHT_BYTES = 0.6e9 * 2
KV_BYTES_PER_TOKEN = 28 * 2 * 8 * 128 * 2  # 114,688
BYTES_PER_S = 3.35e12


def gpu_bound(seq_lens: list[int], forwards: int = 1) -> float:
    """Seconds: the bytes a step over these contexts must read at the peak bandwidth, when it
    runs as `forwards` forwards (each reads every weight; each context is read once)."""
    return (forwards * WEIGHT_BYTES + sum(seq_lens) * KV_BYTES_PER_TOKEN) / BYTES_PER_S


def step_items(rng: random.Random, vocab_size: int, num_requests: int, block_size: int):
    """`build_batch` items for one step: all but the last 4 requests decode one token, the last
    4 bring a 64-token prompt chunk; each has 16 to 128 tokens cached and blocks of its own.
    Returns (items, the number of blocks they use)."""
    items, next_block = [], 0
    for r in range(num_requests):
        cached = rng.randint(16, 128)
        n_new = 1 if r < num_requests - 4 else 64
        ids = [rng.randrange(vocab_size) for _ in range(n_new)]
        n_blocks = num_blocks_for(cached + n_new, block_size)
        items.append((ids, cached, list(range(next_block, next_block + n_blocks)), True))
        next_block += n_blocks
    return items, next_block


def host_times(
    runner: ModelRunner, items: list, batch: BatchInput, vocab_size: int, rounds: int
) -> dict[str, float]:
    """Seconds, fastest of `rounds` interleaved rounds: `build_batch` of `items` (checking every
    token id against `vocab_size`), the runner's `prepare` of `batch`, and the attention
    backend's constructor alone (the part of `prepare` that is not the runner's own check)."""
    args = (batch.block_tables, batch.seq_lens, batch.query_start_loc, batch.slot_mapping)
    return fastest_interleaved(
        {
            "build_batch": lambda: build_batch(items, batch.block_size, vocab_size=vocab_size),
            "prepare": lambda: runner.prepare(batch),
            "backend": lambda: runner.backend_class(runner.kv, *args),
        },
        rounds=rounds,
    )
