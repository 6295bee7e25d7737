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
    engine's
    packed projections (hf_packed); None skips one. A short warm-up, then the median of
    `repeats` rounds. Throughput counts only the tokens the requests asked for."""
    work = make_mixed_workload(
        num_requests, tuple(prompt_lens), tuple(max_tokens), model.cfg.vocab_size, seed
    )
    engine = mixed_engine(model, work, concurrency, budget, block_size)
    warm = [(p[:8], min(m, 4)) for p, m in work[:concurrency]]
    run_engine_mixed(engine, warm)
    hfs = {k: m for k, m in (("hf", hf), ("hf_packed", hf_packed)) if m is not None}
    for m in hfs.values():
        run_hf_mixed(m, warm, concurrency)
    engine_s, hf_s = [], {k: [] for k in hfs}
    for _ in range(repeats):
        engine_s.append(run_engine_mixed(engine, work))
        for k, m in hfs.items():
            hf_s[k].append(run_hf_mixed(m, work, concurrency))
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
        engine_tokens_per_s=useful / statistics.median(engine_s),
        aim=aim,
    )
    for k in hfs:
        out[f"{k}_tokens_per_s"] = useful / statistics.median(hf_s[k])
        out[f"engine_vs_{k}"] = out["engine_tokens_per_s"] / out[f"{k}_tokens_per_s"]
        out["padding"] = padded_work(work, concurrency)
    return out
