"""bench/spec.py — speculative decoding off vs on, at concurrency 1 and 8, in one run.

    python -m minillm bench --speculative ngram          # n-gram prompt lookup, k = 4
    python -m minillm bench --speculative draft          # the bench model's first 2 of 6 layers
    python -m minillm bench --speculative ngram --quick  # a smoke run on the tiny default model
    python -m minillm bench --speculative ngram --save benchmarks/results/spec_ngram_cpu.json
    python -m minillm bench --speculative ngram --disable-by-batch-size 8  # and off at batch 8

Every request is greedy (EOS ignored) and asks for `--max-tokens` new tokens; prompts repeat a
short motif a few times and then add random tokens, as edits of code or documents repeat their
context, which is where prompt lookup finds proposals. At each concurrency c the same seeded
c * --rounds requests run through an engine with max_num_seqs = c, without and with
speculation, the passes alternating (with --disable-by-batch-size n, a third run in each pass:
the same speculation with disable_by_batch_size = n, no proposals while n or more requests run).
Reported: output tokens per second of wall time (prefill
included), target forwards per output token per request (1.0 without speculation: each step
gives a request one token), the acceptance rate and the mean accepted length (tokens per
verify, the bonus included); then, per run, the target's forwards by kind (decode, verify,
prefill: forward_kind) with their seconds, and the draft's forwards, so that tokens per forward
and time per forward come from the same run. Tokens with and without speculation must be
identical: the run fails otherwise.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import torch

from minillm.bench.common import (
    BLOCK_SIZE,
    add_run_options,
    fill_defaults,
    load_average,
    machine,
    model_path,
)
from minillm.bench.forward_split import PARTS, split_forward
from minillm.engine import LLMEngine
from minillm.model import Transformer
from minillm.paged import num_blocks_for
from minillm.sampling import SamplingParams

FULL_RUN = dict(rounds=4, max_tokens=32, k=4, draft_layers=2, repeats=5)
QUICK_RUN = dict(rounds=1, max_tokens=12, k=3, draft_layers=1, repeats=1)
CONCURRENCY = (1, 8)


def make_workload(num_requests: int, vocab_size: int, seed: int) -> list[list[int]]:
    """A motif of 4-8 tokens repeated 2-4 times, then 4-12 random tokens, per request."""
    rng = random.Random(seed)
    work = []
    for _ in range(num_requests):
        motif = [rng.randrange(vocab_size) for _ in range(rng.randint(4, 8))]
        work.append(
            motif * rng.randint(2, 4)
            + [rng.randrange(vocab_size) for _ in range(rng.randint(4, 12))]
        )
    return work


def speculative_config(method: str, k: int, draft_layers: int) -> dict:
    if method == "ngram":
        return {
            "method": "ngram",
            "num_speculative_tokens": k,
            "prompt_lookup_min": 1,
            "prompt_lookup_max": 4,
        }
    return {
        "method": "draft_model",
        "num_speculative_tokens": k,
        "num_draft_layers": draft_layers,
    }


def spec_engine(
    model, prompts, max_tokens: int, concurrency: int, spec: dict | None
) -> LLMEngine:
    """A fresh engine sized for these prompts, as every speculative benchmark pass builds it:
    room for each request's whole context, no end-of-sequence stop."""
    max_len = max(len(p) for p in prompts) + max_tokens + 8
    return LLMEngine(
        model,
        block_size=BLOCK_SIZE,
        max_num_seqs=concurrency,
        max_model_len=max_len,
        num_blocks=concurrency * num_blocks_for(max_len, BLOCK_SIZE) + 1,
        eos_token_id=[],
        speculative_config=spec,
    )


def run(
    model,
    prompts,
    max_tokens: int,
    concurrency: int,
    spec: dict | None,
    proposer=None,
    split: bool = False,
    wrap_proposer=None,
) -> dict:
    """One pass through a fresh engine: seconds, tokens, and the engine's forward and proposal
    counts. proposer replaces the one spec's method builds (spec_sweep.py's oracle);
    wrap_proposer, a function of the built one, returns its replacement (chapter 9's timed
    oracle draft wraps the draft's); split clocks every target forward's projections and
    attention (forward_split.py)."""
    engine = spec_engine(model, prompts, max_tokens, concurrency, spec)
    if proposer is not None:
        engine.spec.proposer = proposer
    if wrap_proposer is not None:
        engine.spec.proposer = wrap_proposer(engine.spec.proposer)
    forward_times: dict[
        int, list[float]
    ] = {}  # query tokens in the step -> seconds of each target forward
    kinds = {k: [0, 0.0] for k in FORWARD_KINDS}  # kind -> [target forwards, their seconds]
    parts: dict[int, list[tuple[float, float]]] = {}  # query tokens -> (proj., attention) ms
    if split:
        engine.runner.forward = split_forward(engine.runner.forward, parts)
    engine.runner.forward = timed_forward(engine.runner.forward, forward_times, kinds)
    draft = [0, 0.0]  # the draft model's forwards and their seconds (draft_model only)
    draft_runner = getattr(engine.spec.proposer, "runner", None) if engine.spec else None
    if draft_runner is not None:
        draft_runner.forward = counted(draft_runner.forward, draft)
    t = time.perf_counter()
    outs = engine.generate(
        prompts, SamplingParams(max_tokens=max_tokens, ignore_eos=True), progress=False
    )
    seconds = time.perf_counter() - t
    st = engine.spec_stats
    # per request: the target forwards that produced its tokens over its tokens (1.0 for plain
    # decoding)
    fpt = sum(o.spec.num_forwards for o in outs) / sum(o.spec.num_output_tokens for o in outs)
    return dict(
        seconds=seconds,
        tokens=[o.token_ids for o in outs],
        forwards_per_token=fpt,
        acceptance_rate=st.acceptance_rate,
        mean_accepted_length=st.mean_accepted_length,
        output_tokens=st.num_output_tokens,
        forward_seconds=sum(
            map(sum, forward_times.values())
        ),  # the rest: drafting, scheduling, sampling
        forward_ms={
            str(n): 1e3 * statistics.median(ts) for n, ts in sorted(forward_times.items())
        },
        # with split: per query-token count, the median ms of the forwards' projections and
        # of their attention (the forward's own median is forward_ms)
        forward_parts={
            str(n): {p: statistics.median(x[i] for x in xs) for i, p in enumerate(PARTS)}
            for n, xs in sorted(parts.items())
        },
        # one denominator for tokens per forward and time per forward: the engine's target
        # forwards of this run, by kind, with their summed seconds
        forwards={k: dict(count=n, seconds=t) for k, (n, t) in kinds.items()},
        draft_forwards=dict(count=draft[0], seconds=draft[1]),
    )


FORWARD_KINDS = ("decode", "verify", "prefill")


def forward_kind(batch) -> str:
    """decode: one query token per request; verify: more, all with logits (verifies, possibly
    beside decodes); prefill: a chunk without logits at every token (a prompt in the step)."""
    n, b = batch.num_tokens, len(batch.seq_lens)
    if n == b:
        return "decode"
    return "verify" if int(batch.logits_indices.shape[0]) == n else "prefill"


def counted(forward, tally: list):
    """forward, its calls counted and timed into tally = [calls, seconds]."""

    def timed(batch):
        t = time.perf_counter()
        out = forward(batch)
        tally[0] += 1
        tally[1] += time.perf_counter() - t
        return out

    return timed


def timed_forward(forward, times: dict[int, list[float]], kinds: dict | None = None):
    """The target's forward, timed and filed by the number of query tokens in the step (what a
    verify adds), and, with kinds, counted and timed by forward_kind into kinds[kind] =
    [forwards, seconds]."""

    def timed(batch):
        t = time.perf_counter()
        logits = forward(batch)
        if logits.is_cuda:
            torch.cuda.synchronize()  # a GPU forward returns before it ends
        dt = time.perf_counter() - t
        times.setdefault(int(batch.input_ids.shape[0]), []).append(dt)
        if kinds is not None:
            tally = kinds[forward_kind(batch)]
            tally[0] += 1
            tally[1] += dt
        return logits

    return timed


def parse_args(argv):
    from minillm.cli.args import existing_folder, int_arg

    p = argparse.ArgumentParser(
        prog="python -m minillm bench --speculative", description=__doc__.split("\n")[0]
    )

    def default(name):
        return f"(default: {FULL_RUN[name]}; with --quick: {QUICK_RUN[name]})"

    p.add_argument(
        "--speculative", required=True, choices=["ngram", "draft"], help="the proposer"
    )
    p.add_argument(
        "--model",
        type=existing_folder,
        default=None,
        help="checkpoint folder (default: the generated bench model)",
    )
    p.add_argument(
        "--rounds",
        type=int_arg(min=1),
        help="requests per concurrency slot " + default("rounds"),
    )
    p.add_argument(
        "--max-tokens",
        type=int_arg(min=1),
        help="new tokens per request " + default("max_tokens"),
    )
    p.add_argument("--k", type=int_arg(min=1), help="num_speculative_tokens " + default("k"))
    p.add_argument(
        "--draft-layers",
        type=int_arg(min=1),
        help="layers of the draft (draft only) " + default("draft_layers"),
    )
    p.add_argument(
        "--repeats",
        type=int_arg(min=1),
        help="timed passes; the median is reported " + default("repeats"),
    )
    p.add_argument(
        "--disable-by-batch-size",
        type=int_arg(min=1),
        default=None,
        help="also run the speculation with disable_by_batch_size = this (default: not run)",
    )
    add_run_options(p)
    args = p.parse_args(argv)
    return fill_defaults(args, QUICK_RUN, FULL_RUN)


def main(argv=None) -> int:
    args = parse_args(list(argv or []))
    load_before = load_average()
    if args.threads:
        torch.set_num_threads(args.threads)
    path = model_path(args)
    model = Transformer.from_pretrained(path)
    cfg = model.cfg
    if args.speculative == "draft" and args.draft_layers > cfg.num_hidden_layers:
        raise SystemExit(
            f"--draft-layers is {args.draft_layers}: the model has only "
            f"{cfg.num_hidden_layers} layers"
        )
    spec = speculative_config(args.speculative, args.k, args.draft_layers)
    print(
        f"model: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, vocab "
        f"{cfg.vocab_size:,}, "
        f"{torch.get_num_threads()} threads; load average {load_before}"
    )
    print(f"speculation: {spec}")
    print(
        f"workload: {args.rounds} request(s) per slot, {args.max_tokens} new tokens each, "
        "greedy"
    )
    for s in (None, spec):  # warm-up: first calls allocate and pick kernels
        run(model, make_workload(2, cfg.vocab_size, args.seed + 1), 4, 2, s)
    runs = [("plain", None), (args.speculative, spec)]
    if args.disable_by_batch_size is not None:
        n = args.disable_by_batch_size
        runs.append((f"{args.speculative}, off at {n}", dict(spec, disable_by_batch_size=n)))
    rows, same = [], True
    for c in CONCURRENCY:
        prompts = make_workload(c * args.rounds, cfg.vocab_size, args.seed + c)
        passes = {name: [] for name, _ in runs}
        for _ in range(args.repeats):  # alternate, so that both see the machine's same moments
            for name, s in runs:
                passes[name].append(run(model, prompts, args.max_tokens, c, s))
        for name, _ in runs:
            ranked = sorted(passes[name], key=lambda p: p["seconds"])
            every = [p["seconds"] for p in passes[name]]  # in pass order, for the scatter
            rows.append(  # the median pass, and every pass's seconds
                dict(ranked[len(ranked) // 2], concurrency=c, name=name, pass_seconds=every)
            )
        same &= all(r["tokens"] == rows[-len(runs)]["tokens"] for r in rows[-len(runs) :])
    print_table(rows)
    print_forward_counts(rows)
    print_forward_costs(rows)
    print(
        "greedy tokens identical with and without speculation"
        if same
        else "TOKENS DIFFER with speculation"
    )
    print(f"load average after: {load_average()} (a shared machine makes wall times noisy)")
    if args.save:
        for r in rows:
            r.pop("tokens")
        saved = dict(
            machine=dict(
                machine(), load_average_before=load_before, load_average_after=load_average()
            ),
            model=dict(cfg.__dict__, path=path.name),
            speculative_config=spec,
            identical_tokens=same,
            workload=dict(
                rounds=args.rounds,
                max_tokens=args.max_tokens,
                seed=args.seed,
                repeats=args.repeats,
                block_size=BLOCK_SIZE,
                disable_by_batch_size=args.disable_by_batch_size,
            ),
            rows=rows,
        )
        Path(args.save).parent.mkdir(parents=True, exist_ok=True)
        Path(args.save).write_text(json.dumps(saved, indent=2) + "\n")
        print(f"saved {args.save}")
    return 0 if same else 1


def print_table(rows: list[dict]) -> None:
    head = (
        f"{'concurrency':>11} | {'run':<15} | {'output tok/s':>12} | {'forwards/token':>14} | "
        f"{'acceptance':>10} | {'mean accepted len':>17} | {'speedup':>7}"
    )
    print("\n" + head + "\n" + "-" * len(head))
    for r in rows:
        plain = next(p for p in rows if p["concurrency"] == r["concurrency"])
        tps = r["output_tokens"] / r["seconds"]
        spd = plain["seconds"] / r["seconds"]
        acc = f"{r['acceptance_rate']:.1%}" if r is not plain else "-"
        mal = f"{r['mean_accepted_length']:.2f}" if r is not plain else "-"
        print(
            f"{r['concurrency']:>11} | {r['name']:<15} | {tps:>12.1f} | "
            f"{r['forwards_per_token']:>14.3f} | "
            f"{acc:>10} | {mal:>17} | {spd:>6.2f}x"
        )


def print_forward_costs(rows: list[dict]) -> None:
    """What one target forward costs against its query tokens, and the share of wall time spent
    outside it."""
    for r in rows:
        if r["concurrency"] == 1 and r["name"] != "plain":
            costs = ", ".join(
                f"{n} token(s) {ms:.1f} ms" for n, ms in r["forward_ms"].items() if int(n) <= 8
            )
            print(f"a batch-1 target forward (median): {costs}")
    for r in rows:
        print(
            f"concurrency {r['concurrency']}, {r['name']}: "
            f"{r['forward_seconds'] / r['seconds']:.0%} of the "
            f"wall time in target forwards"
        )


def print_forward_counts(rows: list[dict]) -> None:
    """Per run: target forwards by kind, draft forwards, and output tokens per target forward
    and ms per target forward, all from the same run."""
    for r in rows:
        f = r["forwards"]
        n = sum(v["count"] for v in f.values())
        sec = sum(v["seconds"] for v in f.values())
        d = r["draft_forwards"]
        print(
            f"concurrency {r['concurrency']}, {r['name']}: {n} target forwards ("
            + ", ".join(f"{f[k]['count']} {k}" for k in FORWARD_KINDS)
            + f"), {r['output_tokens'] / n:.2f} tokens and {1e3 * sec / n:.1f} ms per forward"
            + (f"; {d['count']} draft forwards, {d['seconds']:.2f} s" if d["count"] else "")
        )
