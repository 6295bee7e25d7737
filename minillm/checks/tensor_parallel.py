"""checks/tensor_parallel.py — `python -m minillm check --tp N`: tensor parallel N against one
process, on chapter 5's mixed batch.

The same two steps as checks/mixed_batch.py (two prefills and a first chunk; two decodes and the
rest of the chunk) run once on a plain ModelRunner and once on a group of N ranks; every logits
row is compared. Then the engine generates greedily from the check prompts at TP=1 and TP=N and
the tokens are compared.

TP changes only the order of additions: o_proj and down_proj sum N partial products instead of
one long dot product, so float32 logits differ by rounding alone. The threshold is the book's
fp32 1e-4, or, for models with large logits, 32 float32 roundings (u = 2^-24) of the largest
|logit|, the same count of roundings that checks/mixed_batch.py allows in bf16 and fp16: on the
bench model (|logits| up to 130) a reordered sum already moves a logit by 1e-4. A sharding bug
(a wrong slice, a missing all-reduce) moves logits by about their own size.
"""

from __future__ import annotations

from pathlib import Path

import torch

from minillm.checks.mixed_batch import (
    BLOCK_SIZE,
    FIRST_CHUNK,
    FP32_THRESHOLD,
    LOW_PRECISION_ROUNDINGS,
    check_prompts,
    threshold_for,
)
from minillm.model import Transformer
from minillm.paged import BlockPool, PagedKVCache, num_blocks_for
from minillm.parallel.layers import all_reduces_per_forward, weight_bytes
from minillm.runner import ModelRunner, build_batch


def tp_threshold(dtype: torch.dtype, logit_scale: float) -> float:
    """Largest |TP=N - TP=1| logit difference accepted (see the module docstring)."""
    if dtype == torch.float32:
        return max(FP32_THRESHOLD, LOW_PRECISION_ROUNDINGS * 2.0**-24 * logit_scale)
    return threshold_for(dtype, logit_scale)


def mixed_steps(runner, prompts, vocab_size: int) -> list[tuple[str, str, torch.Tensor]]:
    """Run the check's two steps on `runner`; (request, phase, logits row) for each of the 5
    rows."""
    a, b, c = prompts
    pool = BlockPool(sum(num_blocks_for(len(p) + 1, BLOCK_SIZE) for p in prompts) + 2)
    pool.allocate(1)  # block 0 stays unused, as in checks/mixed_batch.py
    tables = [pool.allocate(num_blocks_for(len(p) + 1, BLOCK_SIZE)) for p in prompts]
    step1 = build_batch(
        [
            (a, 0, tables[0], True),
            (b, 0, tables[1], True),
            (c[:FIRST_CHUNK], 0, tables[2], False),
        ],
        BLOCK_SIZE,
        vocab_size,
    )
    logits1 = runner.forward(step1)  # [2, V]
    next_a, next_b = logits1.argmax(-1).tolist()
    step2 = build_batch(
        [
            ([next_a], len(a), tables[0], True),
            ([next_b], len(b), tables[1], True),
            (c[FIRST_CHUNK:], FIRST_CHUNK, tables[2], True),
        ],
        BLOCK_SIZE,
        vocab_size,
    )
    logits2 = runner.forward(step2)  # [3, V]
    return [
        ("A", "prefill", logits1[0]),
        ("B", "prefill", logits1[1]),
        ("A", "decode", logits2[0]),
        ("B", "decode", logits2[1]),
        ("C", "chunked prefill", logits2[2]),
    ]


def pool_blocks(prompts) -> int:
    return sum(num_blocks_for(len(p) + 1, BLOCK_SIZE) for p in prompts) + 2


@torch.no_grad()
def tp_mixed_batch_check(
    model_path, tensor_parallel_size: int = 2, device="cpu", dtype: torch.dtype = torch.float32
) -> dict:
    """Logits rows at TP=1 and TP=N on the mixed batch, with the all-reduces rank 0 counted per
    forward."""
    from minillm.parallel.workers import TensorParallelWorkers

    single = Transformer.from_pretrained(model_path, dtype=dtype, device=device)
    cfg = single.cfg
    prompts = check_prompts(model_path, cfg.vocab_size)
    blocks = pool_blocks(prompts)
    ref = mixed_steps(
        ModelRunner(single, PagedKVCache.for_model(single, blocks, BLOCK_SIZE)),
        prompts,
        cfg.vocab_size,
    )
    with TensorParallelWorkers(
        model_path, tensor_parallel_size, dtype=dtype, device=device
    ) as workers:
        runner = workers.runner(PagedKVCache.for_model(workers.model, blocks, BLOCK_SIZE))
        stats = workers.model.tp.stats
        stats.reset()
        got = mixed_steps(runner, prompts, cfg.vocab_size)
        counted = dict(
            all_reduce=stats.all_reduce,
            all_reduce_bytes=stats.all_reduce_bytes,
            gather=stats.gather,
        )
        weights, kv = workers.weight_bytes, runner.kv_bytes
    rows = []
    for (request, phase, want), (_, _, have) in zip(ref, got):
        want, have = want.float().cpu(), have.float().cpu()
        threshold = tp_threshold(dtype, want.abs().max().item())
        err = (want - have).abs().max().item()
        rows.append(
            dict(
                request=request,
                phase=phase,
                err=err,
                threshold=threshold,
                ok=err < threshold,
                same_argmax=int(want.argmax()) == int(have.argmax()),
            )
        )
    return dict(
        rows=rows,
        tp=tensor_parallel_size,
        all_reduces=counted["all_reduce"],
        expected_all_reduces=2 * all_reduces_per_forward(cfg.num_hidden_layers),
        gathers=counted["gather"],
        all_reduce_bytes=counted["all_reduce_bytes"],
        weight_bytes=weights,
        kv_bytes=kv,
        single_weight_bytes=weight_bytes(single),
    )


def tp_greedy_check(
    model_path, tensor_parallel_size: int = 2, max_tokens: int = 12, prompts=None
):
    """Greedy token ids from the engine at TP=1 and TP=N, prompt by prompt (by default the
    check's prompts)."""
    from minillm.engine import LLMEngine
    from minillm.model import ModelConfig, read_config
    from minillm.sampling import SamplingParams

    if prompts is None:  # as token ids, so that a checkpoint without a tokenizer works too
        prompts = check_prompts(
            model_path, ModelConfig.from_hf(read_config(Path(model_path))).vocab_size
        )
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    one = [
        o.token_ids
        for o in LLMEngine(model_path, num_blocks=64).generate(list(prompts), params)
    ]
    with LLMEngine(
        model_path, num_blocks=64, tensor_parallel_size=tensor_parallel_size
    ) as engine:
        many = [o.token_ids for o in engine.generate(list(prompts), params)]
    return one, many


def print_tp_check(result: dict, greedy=None) -> bool:
    """Print the rows like the other checks; True when every row and the greedy tokens agree."""
    tp = result["tp"]
    head = (
        f"{'request':<8}{'phase':<17}{f'|TP{tp} - TP1|':>13}{'threshold':>11}  argmax  result"
    )
    print(head)
    print("-" * len(head))
    for r in result["rows"]:
        print(
            f"{r['request']:<8}{r['phase']:<17}{r['err']:>13.1e}{r['threshold']:>11.1e}  "
            f"{'same' if r['same_argmax'] else 'DIFF':>6}  {'OK' if r['ok'] else 'FAIL'}"
        )
    ok = all(r["ok"] and r["same_argmax"] for r in result["rows"])
    worst = max(r["err"] for r in result["rows"])
    print(
        f"{'all' if ok else 'NOT all'} {len(result['rows'])} rows within threshold (max "
        f"|logit error| {worst:.1e})"
    )
    counts_ok = result["all_reduces"] == result["expected_all_reduces"]
    print(
        f"all-reduces on rank 0 in 2 forwards: {result['all_reduces']} (formula 2 x (2 x "
        "layers + 1) = "
        f"{result['expected_all_reduces']}: {'OK' if counts_ok else 'FAIL'}), "
        f"{result['all_reduce_bytes']:,} bytes; "
        f"logit gathers {result['gathers']}"
    )
    mib = lambda b: f"{b / 2**20:.1f}"  # noqa: E731
    print(
        f"weights per rank: {', '.join(mib(b) for b in result['weight_bytes'])} MiB "
        f"(one process: {mib(result['single_weight_bytes'])} MiB); "
        f"KV cache per rank: {', '.join(f'{b / 2**10:.0f}' for b in result['kv_bytes'])} KiB"
    )
    ok = ok and counts_ok
    if greedy is not None:
        one, many = greedy
        same = one == many
        verdict = "identical to" if same else "DIFFER from"
        print(
            f"greedy tokens of {len(one)} prompts, {len(one[0])} each: TP{tp} {verdict} TP1 "
            f"({'OK' if same else 'FAIL'})"
        )
        ok = ok and same
    return ok


def run_check(model_path, tensor_parallel_size: int, device: str = "cpu") -> int:
    """The CLI's `check --tp N`: exit status 0 when TP=N matches TP=1."""
    print(
        f"\ntensor parallel {tensor_parallel_size} vs 1 process on {device}, float32: the "
        "mixed batch"
    )
    result = tp_mixed_batch_check(model_path, tensor_parallel_size, device=device)
    greedy = tp_greedy_check(model_path, tensor_parallel_size)
    return 0 if print_tp_check(result, greedy) else 1
