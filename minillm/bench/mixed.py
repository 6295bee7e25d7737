"""bench/mixed.py — a mixed workload: where static batching pads, and continuous batching does
not.

Each request draws its own prompt length and its own `max_tokens` (seeded), as real traffic
does. Transformers' `generate` batches statically: a batch of c requests is left-padded to its
longest prompt and runs until its longest request is done, so short requests sit in the batch as
padding. The engine keeps c requests running, and a finished request's place goes to the next
one in the very next step. Throughput counts only the tokens each request asked for (EOS
ignored, greedy), for both.
"""

from __future__ import annotations

import random
import statistics
import time

import torch

from minillm.bench.floor import record_forwards
from minillm.engine import LLMEngine
from minillm.paged import num_blocks_for
from minillm.sampling import SamplingParams


def make_mixed_workload(
    num_requests: int,
    prompt_lens: tuple[int, int],
    max_tokens: tuple[int, int],
    vocab_size: int,
    seed: int,
) -> list[tuple[list[int], int]]:
    """Seeded (prompt ids, max_tokens) pairs; both lengths uniform in their (inclusive)
    ranges."""
    rng = random.Random(seed)
    return [
        (
            [rng.randrange(vocab_size) for _ in range(rng.randint(*prompt_lens))],
            rng.randint(*max_tokens),
        )
        for _ in range(num_requests)
    ]


def mixed_engine(model, work, concurrency: int, budget: int, block_size: int) -> LLMEngine:
    """An engine sized for the workload: room for `concurrency` requests of the longest
    length."""
    max_len = max(len(p) for p, _ in work) + max(m for _, m in work)
    return LLMEngine(
        model,
        max_num_seqs=concurrency,
        max_num_batched_tokens=max(budget, max_len),
        num_blocks=concurrency * num_blocks_for(max_len, block_size) + 1,
        block_size=block_size,
        max_model_len=max_len,
        eos_token_id=None,
    )


def run_engine_mixed(engine: LLMEngine, work) -> float:
    """Seconds for the whole workload, every request queued at once."""
    params = [SamplingParams(max_tokens=m, ignore_eos=True) for _, m in work]
    t = time.perf_counter()
    outs = engine.generate([p for p, _ in work], params, progress=False)
    seconds = time.perf_counter() - t
    assert [len(o.token_ids) for o in outs] == [m for _, m in work]
    return seconds


@torch.no_grad()
def run_hf_mixed(hf, work, batch_size: int) -> float:
    """Seconds for transformers' generate on static, left-padded batches of batch_size requests
    in order.

    A batch generates until its longest max_tokens; each request keeps only its own
    max_tokens tokens."""
    t = time.perf_counter()
    for i in range(0, len(work), batch_size):
        group = work[i : i + batch_size]
        width, steps = max(len(p) for p, _ in group), max(m for _, m in group)
        ids = torch.tensor(
            [[0] * (width - len(p)) + p for p, _ in group]
        )  # [c, width]: left padding
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in group])
        out = hf.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=steps,
            min_new_tokens=steps,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
        )
        assert out.shape[1] == width + steps
    return time.perf_counter() - t


def padded_work(work, batch_size: int) -> dict:
    """Token positions static batching computes vs the ones requested: prompt and output, per
    batch."""
    prompt = output = useful_prompt = useful_output = 0
    for i in range(0, len(work), batch_size):
        group = work[i : i + batch_size]
        prompt += len(group) * max(len(p) for p, _ in group)
        output += len(group) * max(m for _, m in group)
        useful_prompt += sum(len(p) for p, _ in group)
        useful_output += sum(m for _, m in group)
    return dict(
        prompt_positions=prompt,
        output_positions=output,
        useful_prompt_tokens=useful_prompt,
        useful_output_tokens=useful_output,
    )


def record_hf_calls(hf, log: list):
    """Until the returned function is called, every forward of the transformers model `hf`
    appends (tokens, rows, seconds) to `log`: the records `bench.floor.record_forwards` keeps
    for the engine (a decode forward has one token per row)."""
    inner = hf.forward

    def forward(*args, **kwargs):
        ids = kwargs["input_ids"] if "input_ids" in kwargs else args[0]  # [rows, tokens]
        t = time.perf_counter()
        out = inner(*args, **kwargs)
        log.append((ids.numel(), ids.shape[0], time.perf_counter() - t))
        return out

    hf.forward = forward
    return lambda: delattr(hf, "forward")  # the class's forward again


def step_summary(log, wall_s: float) -> dict:
    """One round of one side: how many decode forwards (one token per row) it ran and how many
    that carry a prompt, their mean time and rows, and the wall time around them."""
    decode = [(r, s) for n, r, s in log if n == r]
    prompt = [s for n, r, s in log if n != r]
    return dict(
        decode_forwards=len(decode),
        decode_ms=1e3 * statistics.mean(s for _, s in decode) if decode else 0.0,
        decode_rows=statistics.mean(r for r, _ in decode) if decode else 0.0,
        prompt_forwards=len(prompt),
        prompt_ms=1e3 * statistics.mean(prompt) if prompt else 0.0,
        forward_s=sum(s for *_, s in log),
        wall_s=wall_s,
    )


def median_round(seconds: list[float], log: list, spans: list[tuple[int, int]]):
    """The median round's seconds and its slice of `log` (spans: each round's (start, end))."""
    i = sorted(range(len(seconds)), key=seconds.__getitem__)[len(seconds) // 2]
    start, end = spans[i]
    return seconds[i], log[start:end]


def with_packed_projections(hf):
    """A copy of a transformers model whose every bias-free nn.Linear runs
    `minillm.model.linear`:
    the engine's packed projections with transformers' own loop around them, so the mixed
    workload says how much of the engine's gain is kernels and how much is scheduling."""
    import copy

    from torch import nn

    from minillm.model import linear

    packed = copy.deepcopy(hf)
    for m in packed.modules():
        if isinstance(m, nn.Linear) and m.bias is None:
            m.forward = lambda x, m=m: linear(x, m.weight)  # noqa: E731 (one closure per layer)
    return packed


def measure_mixed(
    model,
    hf,
    hf_packed,
    num_requests: int,
    prompt_lens,
    max_tokens,
    concurrency: int,
    budget: int,
    block_size: int,
    repeats: int,
    seed: int,
    aim: float,
) -> dict:
    """The engine against transformers' static batches, as a user runs it (hf) and with the
    engine's packed projections (hf_packed); None skips one. A short warm-up, then `repeats`
    timed rounds; each side's throughput is of its median round, each ratio the median of the
    rounds' ratios (`..._rounds`). Throughput counts only the tokens the requests asked for;
    `steps` counts and times each side's forwards in each side's median round."""
    work = make_mixed_workload(
        num_requests, tuple(prompt_lens), tuple(max_tokens), model.cfg.vocab_size, seed
    )
    engine = mixed_engine(model, work, concurrency, budget, block_size)
    warm = [(p[:8], min(m, 4)) for p, m in work[:concurrency]]
    run_engine_mixed(engine, warm)
    hfs = {k: m for k, m in (("hf", hf), ("hf_packed", hf_packed)) if m is not None}
    for m in hfs.values():
        run_hf_mixed(m, warm, concurrency)
    logs = {k: [] for k in ["engine", *hfs]}  # every forward of the timed rounds, per side
    seconds = {k: [] for k in logs}
    spans = {k: [] for k in logs}  # each round's slice of its side's log
    record_forwards(engine, logs["engine"])
    stops = [record_hf_calls(m, logs[k]) for k, m in hfs.items()]
    for _ in range(repeats):
        for k in logs:
            start = len(logs[k])
            if k == "engine":
                seconds[k].append(run_engine_mixed(engine, work))
            else:
                seconds[k].append(run_hf_mixed(hfs[k], work, concurrency))
            spans[k].append((start, len(logs[k])))
    for stop in stops:
        stop()
    median = {k: median_round(seconds[k], logs[k], spans[k]) for k in logs}
    useful = sum(m for _, m in work)
    out = dict(
        workload=dict(
            requests=len(work),
            prompt_lens=list(prompt_lens),
            max_tokens=list(max_tokens),
            concurrency=concurrency,
            seed=seed,
        ),
        useful_output_tokens=useful,
        engine_tokens_per_s=useful / median["engine"][0],
        aim=aim,
        steps={k: step_summary(log, s) for k, (s, log) in median.items()},  # median rounds
    )
    out["seconds"] = seconds  # every timed round, per side, in the order run
    for k in hfs:
        out[f"{k}_tokens_per_s"] = useful / median[k][0]
        # round by round: within a round the sides run back to back, so like meets like
        rounds = [h / e for e, h in zip(seconds["engine"], seconds[k])]
        out[f"engine_vs_{k}_rounds"] = rounds
        out[f"engine_vs_{k}"] = statistics.median(rounds)
        out["padding"] = padded_work(work, concurrency)
    return out
