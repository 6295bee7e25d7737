"""bench/floor.py — the memory floor of a decode step, and where a step's milliseconds go.

A decode step of batch size 1 multiplies one row against every weight matrix, so it cannot be
faster than the time it takes to read all the weights once from memory: weight bytes / streaming
bandwidth. This module measures the pieces `python -m minillm bench` prints next to its
throughput table:

- `stream_bandwidth`: the machine's streaming read bandwidth (a sum over a buffer far larger
  than the CPU caches, best of a few runs);
- `decode_weight_bytes`: the bytes one decode step reads (every weight matrix; the embedding
  table only if the output layer shares it, since a lookup reads one row);
- `step_times`: one `ModelRunner.forward` of a pure-decode batch against its number of rows, the
  figure that shows why batching pays (the weights are read once per step, whatever the rows);
- `profile_decode_step`: a `torch.profiler` table of one decode step, by operator;
- `profiled_forward`: one bs-1 forward's wall time beside its operators' time and its
  projections' (the floor's rounds profile one each): what separates the step from the floor,
  measured;
- `record_forwards`, `record_model_calls` and `split_seconds`: each contender's wall time split
  into decode forwards, forwards that carry a prompt, and the rest, from the timed runs
  themselves.
"""

from __future__ import annotations

import statistics
import time

import torch

from minillm.model import Transformer
from minillm.paged import PagedKVCache, num_blocks_for
from minillm.runner import ModelRunner, build_batch

STREAM_BYTES = (
    256 * 2**20
)  # 8x the 32 MB L3 of the machine the book was written on: memory, not cache


def stream_bandwidth(num_bytes: int = STREAM_BYTES, repeats: int = 7) -> float:
    """Bytes per second of a streaming read (torch's sum over a float32 buffer), best of
    `repeats`."""
    buf = torch.ones(num_bytes // 4)
    buf.sum()  # first touch: page faults belong to no read
    best = min(_seconds(buf.sum) for _ in range(repeats))
    return num_bytes / best


def decode_weight_bytes(model: Transformer) -> int:
    """Bytes of weights a decode step reads: every parameter once (a tied head counted once),
    except an
    untied embedding table, of which a lookup reads only the rows of the step's tokens."""
    seen, total = set(), 0
    skip = set() if model.cfg.tie_word_embeddings else {model.embed_tokens.weight.data_ptr()}
    for p in model.parameters():
        if p.data_ptr() in seen or p.data_ptr() in skip:
            continue
        seen.add(p.data_ptr())
        total += p.numel() * p.element_size()
    return total


def decode_batch(model: Transformer, rows: int, context: int, block_size: int):
    """A runner and a pure-decode batch: `rows` requests, each with `context` cached tokens, one
    new token each."""
    per_request = num_blocks_for(context + 1, block_size)
    runner = ModelRunner(model, PagedKVCache.for_model(model, rows * per_request, block_size))
    g = torch.Generator().manual_seed(rows)
    ids = torch.randint(0, model.cfg.vocab_size, (rows,), generator=g).tolist()
    items = [
        ([t], context, list(range(r * per_request, (r + 1) * per_request)), True)
        for r, t in enumerate(ids)
    ]
    return runner, build_batch(
        items, block_size
    )  # the cached K/V are zeros: their values do not change the time


def step_times(
    model: Transformer, rows_list, context: int, block_size: int, repeats: int = 5
) -> list[dict]:
    """Median seconds of one decode forward (ModelRunner.forward) for each number of rows."""
    out = []
    for rows in rows_list:
        runner, batch = decode_batch(model, rows, context, block_size)
        runner.forward(batch)  # warm-up: allocations, kernel choice
        seconds = statistics.median(
            _seconds(lambda runner=runner, batch=batch: runner.forward(batch))
            for _ in range(repeats)
        )
        out.append(dict(rows=rows, ms=seconds * 1e3))
    return out


def profile_decode_step(
    model: Transformer, rows: int, context: int, block_size: int, row_limit: int = 12
) -> str:
    """A torch.profiler table of one decode forward of `rows` rows: operators by their own CPU
    time."""
    from torch.profiler import ProfilerActivity, profile

    runner, batch = decode_batch(model, rows, context, block_size)
    runner.forward(batch)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        runner.forward(batch)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=row_limit)


# The operators a projection runs as: oneDNN's packed linear on CPU, BLAS's products elsewhere.
# (aten::bmm is attention, not a projection.)
PROJECTION_OPS = ("mkldnn::_linear_pointwise", "aten::mm", "aten::addmm")


def profiled_forward(runner: ModelRunner, batch) -> dict:
    """One forward under torch.profiler: its wall time, the CPU time of all its operators, and
    that of its projections, in ms, with the number of projection calls.

    The wall time minus the operators is the time between operators (Python, dispatch, the
    profiler's own records)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        wall_ms = _seconds(lambda: runner.forward(batch)) * 1e3
    events = prof.key_averages()
    ops = [e for e in events if e.key in PROJECTION_OPS]
    return dict(
        profiled_wall_ms=wall_ms,
        operators_ms=sum(e.self_cpu_time_total for e in events) / 1e3,  # us -> ms
        projections_ms=sum(e.self_cpu_time_total for e in ops) / 1e3,
        projection_calls=sum(e.count for e in ops),
    )


def record_forwards(engine, log: list | None = None) -> list[tuple[int, int, float]]:
    """From now on, every `engine.runner.forward` appends (tokens, requests, seconds) to the
    returned list (`log`, if given).

    Timing the engine's own forwards, in the same run as its steps, pairs each step with its
    forward: a separate measurement minutes later would differ by whatever else the machine
    did meanwhile."""
    log, inner = ([] if log is None else log), engine.runner.forward

    def forward(batch):
        t = time.perf_counter()
        out = inner(batch)
        log.append((batch.num_tokens, batch.num_reqs, time.perf_counter() - t))
        return out

    engine.runner.forward = forward
    return log


def record_model_calls(model: Transformer, log: list):
    """Until the returned function is called, every call of `model` appends (tokens, 1,
    seconds) to `log`: the same records as `record_forwards`, for a loop that calls the model
    itself (chapter 2's `generate`, one request, so one row per decode)."""
    inner = model.forward

    def forward(input_ids, *args, **kwargs):
        t = time.perf_counter()
        out = inner(input_ids, *args, **kwargs)
        log.append((input_ids.numel(), 1, time.perf_counter() - t))
        return out

    model.forward = forward
    return lambda: delattr(model, "forward")  # the class's forward again


def split_seconds(forwards, wall_s: float) -> dict:
    """Wall seconds split three ways: pure-decode forwards (one token per request), forwards
    that carry a prompt (prefill, or a prompt chunk beside decodes), and everything else (the
    loop or the engine around the forwards: scheduling, batch building, sampling)."""
    decode_s = sum(s for tokens, reqs, s in forwards if tokens == reqs)
    prompt_s = sum(s for tokens, reqs, s in forwards if tokens != reqs)
    return dict(
        decode_s=decode_s,
        prompt_s=prompt_s,
        other_s=wall_s - decode_s - prompt_s,
        forwards=len(forwards),
    )


def measure_floor(
    model: Transformer,
    levels,
    itls: dict,
    forwards: dict,
    context: int,
    block_size: int,
    aim_percent: float,
    floor_rounds: int = 5,
) -> tuple[dict, list[dict]]:
    """Bandwidth, the bs-1 floor, one decode forward against its rows, and the engine's per-step
    overhead.

    itls: for each concurrency, the engine's gaps between tokens in the timed runs (one step
    each: the scheduling, batch building and sampling around the forward). forwards: for each
    concurrency, the (tokens, requests, seconds) of the engine's forwards in those runs. The
    median gap minus the median forward of a pure-decode step of c rows is what remains per-step
    overhead. The floor's verdict times its own 1-row forward, in turns with the bandwidth.
    """
    weight_bytes = decode_weight_bytes(model)
    # One timing per row count: the engine's own pure-decode forwards of c rows in the timed
    # runs, the runs whose ratios the ceiling bounds and the aims judge. (A run that timed no
    # engine at some c, such as a test's, times a forward alone instead.)
    steps = []
    for rows in levels:
        decodes = [sec for n, b, sec in forwards.get(rows, []) if n == b == rows]
        gaps = itls.get(rows)
        if decodes:
            s = dict(rows=rows, ms=statistics.median(decodes) * 1e3, timed="in the runs")
        else:
            (s,) = step_times(model, [rows], context, block_size)
            s["timed"] = "alone"
        s["weights_gb_per_s"] = weight_bytes / (s["ms"] * 1e-3) / 1e9
        s["engine_step_ms"] = statistics.median(gaps) * 1e3 if gaps else None
        s["overhead_ms"] = s["engine_step_ms"] - s["ms"] if gaps and decodes else None
        steps.append(s)
    for s in steps:  # c * t(1) / t(c): what c requests per step can gain at these step times
        s["ceiling"] = s["rows"] * steps[0]["ms"] / s["ms"]
    # The floor and the bs-1 step, measured in alternation: on a shared machine the bandwidth
    # one gets changes from minute to minute, and a ratio of two numbers measured minutes apart
    # would show that. Each round also profiles one forward, so the split of the forward into
    # projections, other operators and the time between them comes from the same minutes.
    runner, batch = decode_batch(model, 1, context, block_size)
    runner.forward(batch)
    pairs, profiled = [], []
    for _ in range(floor_rounds):
        bandwidth = stream_bandwidth(repeats=3)
        forward_s = statistics.median(
            _seconds(lambda runner=runner, batch=batch: runner.forward(batch)) for _ in range(3)
        )
        pairs.append((bandwidth, forward_s))
        profiled.append(profiled_forward(runner, batch))
    bandwidth = statistics.median(b for b, _ in pairs)
    forward_ms = statistics.median(f for _, f in pairs) * 1e3
    overhead_ms = steps[0]["overhead_ms"] or 0.0
    floor_ms = weight_bytes / bandwidth * 1e3
    # each round's floor over that round's engine step (its forward plus the engine's per-step
    # overhead)
    percent = statistics.median(
        100 * (weight_bytes / b * 1e3) / (f * 1e3 + overhead_ms) for b, f in pairs
    )
    split = {k: statistics.median(p[k] for p in profiled) for k in profiled[0]}
    split["projection_calls"] = profiled[0]["projection_calls"]
    split["projections_gb_per_s"] = weight_bytes / (split["projections_ms"] * 1e-3) / 1e9
    floor = dict(
        bandwidth_gb_per_s=bandwidth / 1e9,
        threads=torch.get_num_threads(),
        weight_bytes=weight_bytes,
        floor_ms=floor_ms,
        forward_ms=forward_ms,
        overhead_ms=overhead_ms,
        engine_decode_ms=forward_ms + overhead_ms,
        percent_of_floor=percent,
        aim_percent=aim_percent,
        context=context,
        rounds=floor_rounds,
        **split,  # medians over the rounds of one profiled forward each
    )
    return floor, steps


def _seconds(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t
