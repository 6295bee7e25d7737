"""bench/throughput.py — throughput vs concurrency: one request at a time, the engine, and
transformers' generate.

    python -m minillm bench                      # the full run: about 6 minutes on 2 CPU cores
    python -m minillm bench --save benchmarks/results/cpu.json
    python -m minillm bench --quick              # a smoke run of a few seconds, tiny model
    python -m minillm bench --workload shared-prefix   # prefix caching off vs on (prefix.py)
    python -m minillm bench --speculative ngram|draft  # speculative decoding (spec.py)

Every contender serves the same seeded requests on the same checkpoint, greedy, each request
asking for exactly `--max-tokens` new tokens (EOS ignored), so all of them do the same work: (a)
one request at a time with chapter 2's `kv_cache.generate` (the unbatched baseline), (b) the
engine with up to c requests running together (max_num_seqs = c, every request queued at once),
(c) transformers' `generate` on left-padded batches of c requests. Throughput is output tokens
over wall time, prefill included. The targets are for generation (their baseline is a
decode rate), so the default workload is generation-heavy: prompts of 8-32 tokens, 32 new tokens
each. Each contender runs once to warm up, then `--repeats` timed rounds (the order of
contenders alternates between rounds, so drift hits them alike). Every ratio is taken round by
round, between contenders that ran back to back; the run reports the median of those ratios and
judges a target met or missed only when every round's ratio is on the same side of it ("within
noise" otherwise). The wall-time split (`split_seconds`) is saved for every round. All of
them compute every projection through `model.linear` (oneDNN on weights packed once, on CPU), so
the ratios compare batching, not kernels. A ratio above c, or above the ceiling c * t(1) / t(c)
that the step times allow, is not batching but an artifact: the run reports it as a problem and
exits with status 1 (tests/test_bench.py checks a quick run for it).

The same run then measures (bench/floor.py) the machine's streaming read bandwidth, the bs-1
decode floor it implies (weight bytes / bandwidth) and the engine's bs-1 decode step against it,
and one decode step's time against its rows; then (bench/mixed.py) a mixed workload, prompt
lengths and max_tokens drawn per request, with the engine against transformers' static batches
as a user runs them and against transformers with the same packed projections (kernels vs
scheduling); and (bench/forms.py) one projection computed each way for 1 to 16 rows on 1 and 2
threads. Where an aim is missed, a torch.profiler table of a decode step shows where the
milliseconds go.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import torch

from minillm.bench import floor as bench_floor
from minillm.bench import forms as bench_forms
from minillm.bench import mixed as bench_mixed
from minillm.bench.common import BLOCK_SIZE, fill_defaults, load_average, machine, model_path
from minillm.bench.report import (
    print_breakdown,
    print_floor,
    print_mixed,
    print_table,
    spread_verdict,
)
from minillm.engine import LLMEngine
from minillm.kv_cache import generate
from minillm.model import Transformer
from minillm.paged import num_blocks_for
from minillm.sampling import SamplingParams

TARGETS = {2: 1.8, 4: 3.0, 8: 4.0}  # the batching targets: throughput over one at a time
LATENCY_TARGET = 1.05  # engine at concurrency 1 vs one-at-a-time: time for the same requests
FLOOR_AIM_PERCENT = 75  # the engine's bs-1 decode at >= 75% of the memory floor's speed
# t(c) / t(1) of one decode forward, at most what keeps the target at c reachable: the ceiling
# c * t(1) / t(c) reaches the target only while t(c) / t(1) <= c / target
STEP_AIMS = {c: c / TARGETS[c] for c in (2, 8)}
ARTIFACT_TOLERANCE = 1.10  # a ratio this far above c, or above its ceiling, is an artifact
MIXED_AIM = 3.0  # the engine over transformers' static batches on the mixed workload


def make_workload(
    num_requests: int, prompt_lens: tuple[int, int], vocab_size: int, seed: int
) -> list[list[int]]:
    """Seeded prompts of random token ids with lengths uniform in prompt_lens (inclusive)."""
    rng = random.Random(seed)
    return [
        [rng.randrange(vocab_size) for _ in range(rng.randint(*prompt_lens))]
        for _ in range(num_requests)
    ]


def run_one_at_a_time(model, prompts, max_tokens) -> tuple[float, list[float]]:
    """(a): seconds for the whole workload, and each request's latency."""
    latencies = []
    for p in prompts:
        t = time.perf_counter()
        out = generate(model, p, max_tokens)
        latencies.append(time.perf_counter() - t)
        assert len(out) == max_tokens
    return sum(latencies), latencies


def run_engine_serial(
    engine: LLMEngine, prompts, max_tokens, itl: list | None = None
) -> tuple[float, list[float]]:
    """(b) at concurrency 1: each request through the engine alone, timed from submission to
    last token.
    Each request's inter-token gaps (one decode step each) are added to `itl` if given."""
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    latencies = []
    for p in prompts:
        t = time.perf_counter()
        out = engine.generate([p], params, progress=False)[0]
        latencies.append(time.perf_counter() - t)
        assert len(out.token_ids) == max_tokens
        if itl is not None:
            itl += out.itl
    return sum(latencies), latencies


def run_engine(engine: LLMEngine, prompts, max_tokens, itl: list | None = None) -> float:
    """(b): every request queued at once; the engine keeps up to max_num_seqs of them
    running."""
    t = time.perf_counter()
    outs = engine.generate(
        prompts, SamplingParams(max_tokens=max_tokens, ignore_eos=True), progress=False
    )
    seconds = time.perf_counter() - t
    assert all(len(o.token_ids) == max_tokens for o in outs)
    if itl is not None:
        itl += [gap for o in outs for gap in o.itl]
    return seconds


@torch.no_grad()
def run_hf(hf, prompts, max_tokens, batch_size) -> float:
    """(c): transformers' generate on left-padded batches of batch_size prompts, in submission
    order."""
    t = time.perf_counter()
    for i in range(0, len(prompts), batch_size):
        group = prompts[i : i + batch_size]
        width = max(len(p) for p in group)
        ids = torch.tensor(
            [[0] * (width - len(p)) + p for p in group]
        )  # left padding: new tokens line up
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in group])
        out = hf.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=max_tokens,
            min_new_tokens=max_tokens,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
        )
        assert out.shape[1] == width + max_tokens
    return time.perf_counter() - t


# Options --quick changes, with their full-run and quick values; --quick sets only those not
# given.
FULL_RUN = dict(
    concurrency=[1, 2, 4, 8, 16],
    requests=16,
    prompt_lens=[8, 32],
    max_tokens=32,
    repeats=3,
    mixed_requests=16,
    mixed_prompt_lens=[8, 256],
    mixed_max_tokens=[8, 128],
)
QUICK_RUN = dict(
    concurrency=[1, 2, 4],
    requests=4,
    prompt_lens=[4, 12],
    max_tokens=4,
    repeats=1,
    mixed_requests=8,
    mixed_prompt_lens=[4, 32],
    mixed_max_tokens=[2, 16],
)
FORMS_RUN = dict(rows_list=[1, 2, 5, 8, 16], threads_list=[1, 2], budget_s=0.2)  # side by side
FORMS_QUICK = dict(rows_list=[1, 2], threads_list=[1], budget_s=0.005)


def artifact_problems(
    rows: list[dict], steps: list[dict], tolerance: float = ARTIFACT_TOLERANCE
) -> list[str]:
    """Ratios batching cannot produce: more than c times one-at-a-time, or more than the ceiling
    c * t(1) / t(c) that the measured step times allow (a ceiling only while t(c) >= t(1): a
    step of c rows cheaper than one of 1 is a kernel effect, which the first check catches).
    One line each."""
    ceiling = {s["rows"]: s["ceiling"] for s in steps}
    problems = []
    for r in rows:
        c, ratio = r["concurrency"], r["engine_vs_one_at_a_time"]
        if ratio > c * tolerance:
            problems.append(
                f"engine at {c} requests is {ratio:.2f}x one at a time: above {c}, "
                "so not batching alone"
            )
        if c in ceiling and ceiling[c] * tolerance < ratio:
            problems.append(
                f"engine at {c} requests is {ratio:.2f}x one at a time: above the "
                f"ceiling c * t(1) / t(c) = {ceiling[c]:.2f}x its own step times allow"
            )
    return problems


def parse_args(argv):
    from minillm.cli.args import existing_folder, int_arg, int_list_arg, writable_file

    p = argparse.ArgumentParser(
        prog="python -m minillm bench", description=__doc__.split("\n")[0]
    )

    def default(name):
        show = lambda v: ",".join(map(str, v)) if isinstance(v, list) else v  # noqa: E731
        return f"(default: {show(FULL_RUN[name])}; with --quick: {show(QUICK_RUN[name])})"

    p.add_argument(
        "--model",
        type=existing_folder,
        default=None,
        help="checkpoint folder (default: the generated bench model)",
    )
    p.add_argument(
        "--concurrency",
        type=int_list_arg(min=1),
        help="comma-separated concurrency levels " + default("concurrency"),
    )
    p.add_argument(
        "--requests",
        type=int_arg(min=1),
        help="requests in the workload " + default("requests"),
    )
    p.add_argument(
        "--prompt-lens",
        type=int_list_arg(min=1, length=2, ascending=True),
        help="min,max prompt length in tokens " + default("prompt_lens"),
    )
    p.add_argument(
        "--max-tokens",
        type=int_arg(min=1),
        help="new tokens per request " + default("max_tokens"),
    )
    p.add_argument(
        "--repeats",
        type=int_arg(min=1),
        help="timed rounds per contender; each is judged on its median round "
        + default("repeats"),
    )
    p.add_argument(
        "--budget", type=int_arg(min=1), default=512, help="the engine's max_num_batched_tokens"
    )
    p.add_argument(
        "--mixed-requests",
        type=int_arg(min=1),
        help="requests of the mixed workload " + default("mixed_requests"),
    )
    p.add_argument(
        "--mixed-prompt-lens",
        type=int_list_arg(min=1, length=2, ascending=True),
        help="min,max prompt length of the mixed workload " + default("mixed_prompt_lens"),
    )
    p.add_argument(
        "--mixed-max-tokens",
        type=int_list_arg(min=1, length=2, ascending=True),
        help="min,max of max_tokens in the mixed workload " + default("mixed_max_tokens"),
    )
    p.add_argument(
        "--mixed-concurrency",
        type=int_arg(min=1),
        default=8,
        help="the engine's max_num_seqs and transformers' batch size on the mixed workload",
    )
    p.add_argument(
        "--threads",
        type=int_arg(min=1),
        default=None,
        help="torch CPU threads (default: torch's choice)",
    )
    p.add_argument("--no-hf", action="store_true", help="skip transformers' generate")
    p.add_argument("--seed", type=int_arg(min=0), default=0)
    p.add_argument(
        "--save",
        type=writable_file,
        default=None,
        help="write the results as JSON to this path (checked first)",
    )
    p.add_argument(
        "--note",
        default=None,
        help="a line saved with the results (e.g. how busy the machine was)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a seconds-long smoke run on the tiny default model",
    )
    p.add_argument(
        "--workload",
        default="concurrency",
        choices=["concurrency", "shared-prefix"],
        help="concurrency (this table) or shared-prefix (prefix caching off vs on; see "
        "bench/prefix.py)",
    )
    argv = list(argv or [])
    if argv[:1] == [
        "--"
    ]:  # `python -m minillm bench -- --quick`: the separator some shells need
        argv = argv[1:]
    args = p.parse_args(argv)
    return fill_defaults(args, QUICK_RUN, FULL_RUN)


def main(argv=None) -> int:
    argv = list(argv or [])
    if "--workload=shared-prefix" in argv or ["--workload", "shared-prefix"] in map(
        list, zip(argv, argv[1:])
    ):
        from minillm.bench.prefix import (
            main as shared_prefix_main,
        )  # its own options: see bench/prefix.py

        return shared_prefix_main(argv)
    if any(a == "--speculative" or a.startswith("--speculative=") for a in argv):
        from minillm.bench.spec import (
            main as speculative_main,
        )  # its own options: see bench/spec.py

        return speculative_main(argv)
    args = parse_args(argv)
    load_before = load_average()
    if args.threads:
        torch.set_num_threads(args.threads)
    levels = sorted(set(args.concurrency) | {1})
    lo, hi = args.prompt_lens
    path = model_path(args)
    model = Transformer.from_pretrained(path)
    cfg = model.cfg
    prompts = make_workload(args.requests, (lo, hi), cfg.vocab_size, args.seed)
    n_tokens = len(prompts) * args.max_tokens
    print(
        f"model: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, MLP "
        f"{cfg.intermediate_size}, "
        f"heads {cfg.num_attention_heads}/{cfg.num_key_value_heads} KV of {cfg.hd}, vocab "
        f"{cfg.vocab_size:,} "
        f"({sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters, fp32)"
    )
    print(
        f"workload: {len(prompts)} requests, prompts of {lo}-{hi} tokens, {args.max_tokens} "
        "new tokens each "
        f"({n_tokens} output tokens), greedy; {args.repeats} timed round(s) after a warm-up; "
        f"{torch.get_num_threads()} torch threads"
    )

    max_len = hi + args.max_tokens
    engines = {
        c: LLMEngine(
            model,
            max_num_seqs=c,
            max_num_batched_tokens=max(args.budget, max_len),
            num_blocks=c * num_blocks_for(max_len, BLOCK_SIZE) + 1,
            block_size=BLOCK_SIZE,
            max_model_len=max_len,
            eos_token_id=None,
        )
        for c in levels
    }
    hf = None
    if not args.no_hf:
        from minillm.checks.reference import hf_model

        hf = hf_model(str(path))
    contenders = (
        [("one at a time", 1)]
        + [("engine", c) for c in levels]
        + ([("transformers", c) for c in levels] if hf is not None else [])
    )

    itls = {
        c: [] for c in levels
    }  # the engine's gaps between tokens: one decode step each, overhead included

    def run(name, c, work, timed=True):
        if name == "one at a time":
            return run_one_at_a_time(model, work, args.max_tokens)
        if name == "engine" and c == 1:
            return run_engine_serial(
                engines[1], work, args.max_tokens, itls[1] if timed else None
            )
        if name == "engine":
            return run_engine(
                engines[c], work, args.max_tokens, itls[c] if timed else None
            ), None
        return run_hf(hf, work, args.max_tokens, c), None

    warm = prompts[: max(levels)]
    for name, c in contenders:  # warm-up: first calls allocate, and pick kernels
        run(name, c, [p[:8] for p in warm][:c] if c > 1 else warm[:1], timed=False)
    forwards = {
        c: bench_floor.record_forwards(engines[c]) for c in levels
    }  # the timed runs' forwards
    baseline_calls = []  # the unbatched loop's model calls in the timed runs
    logs = {("one at a time", 1): baseline_calls} | {("engine", c): forwards[c] for c in levels}
    seconds = {k: [] for k in contenders}
    spans = {k: [] for k in logs}  # each timed round's slice of its forward log
    for r in range(args.repeats):
        order = (
            contenders if r % 2 == 0 else contenders[::-1]
        )  # alternate, so drift hits every contender alike
        for key in order:
            stop = (
                bench_floor.record_model_calls(model, baseline_calls)
                if key == ("one at a time", 1)
                else None
            )
            start = len(logs[key]) if key in logs else 0
            s, _ = run(*key, prompts)
            if stop:
                stop()
            seconds[key].append(s)
            if key in logs:
                spans[key].append((start, len(logs[key])))

    # Every ratio is taken round by round: within a round the contenders run back to back, so
    # one round's ratio compares like with like; the reported ratio is the median of them, and
    # a target is judged on all of them (report.spread_verdict).
    def per_round(a, b):  # each round's seconds of a over seconds of b
        return [x / y for x, y in zip(seconds[a], seconds[b])]

    median_round = {
        k: sorted(range(len(v)), key=v.__getitem__)[len(v) // 2] for k, v in seconds.items()
    }
    tps = {k: n_tokens / v[median_round[k]] for k, v in seconds.items()}
    base = tps[("one at a time", 1)]
    baseline = ("one at a time", 1)
    # the same requests, one at a time, through the engine and through chapter 2's loop
    latency_rounds = per_round(("engine", 1), baseline)  # its time over the baseline's
    latency_ratio = statistics.median(latency_rounds)
    # where each one's wall time went, round by round: what the ratios are made of
    breakdown_rounds = {}
    for key, log in logs.items():
        name = "one at a time" if key[0] == "one at a time" else f"engine @{key[1]}"
        breakdown_rounds[name] = [
            dict(bench_floor.split_seconds(log[start:end], s), output_tokens=n_tokens)
            for (start, end), s in zip(spans[key], seconds[key])
        ]
    breakdown = {
        name: b[median_round[k]] for (name, b), k in zip(breakdown_rounds.items(), logs)
    }
    rows = []
    for c in levels:
        ratios = per_round(baseline, ("engine", c))  # a speed-up: the baseline's time over c's
        row = dict(
            concurrency=c,
            engine_tokens_per_s=tps[("engine", c)],
            engine_vs_one_at_a_time=statistics.median(ratios),
            rounds=ratios,
            target=TARGETS.get(c),
        )
        if hf is not None:
            row.update(
                hf_tokens_per_s=tps[("transformers", c)],
                hf_vs_one_at_a_time=statistics.median(per_round(baseline, ("transformers", c))),
                engine_vs_hf=statistics.median(per_round(("transformers", c), ("engine", c))),
            )
        rows.append(row)
    print_table(base, rows, latency_rounds, LATENCY_TARGET)
    print_breakdown(breakdown)
    ratios_ok = spread_verdict(latency_rounds, LATENCY_TARGET, at_most=True) == "ok" and all(
        spread_verdict(r["rounds"], r["target"]) == "ok" for r in rows if r["target"]
    )

    context = hi + args.max_tokens // 2  # a typical decode's context in this workload
    floor, steps = bench_floor.measure_floor(
        model, levels, itls, forwards, context, BLOCK_SIZE, FLOOR_AIM_PERCENT
    )
    for s in steps:
        s["aim"] = STEP_AIMS.get(s["rows"])
    print_floor(floor, steps)
    problems = artifact_problems(rows, steps)
    for line in problems:
        print("ARTIFACT", line)
    forms_run = FORMS_QUICK if args.quick else FORMS_RUN
    V, d, inter = cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size
    forms = bench_forms.form_times(
        {f"output {V}x{d}": (V, d), f"MLP {inter}x{d}": (inter, d)}, **forms_run
    )
    bench_forms.print_forms(forms)
    hf_packed = bench_mixed.with_packed_projections(hf) if hf is not None else None
    mixed = bench_mixed.measure_mixed(
        model,
        hf,
        hf_packed,
        args.mixed_requests,
        args.mixed_prompt_lens,
        args.mixed_max_tokens,
        args.mixed_concurrency,
        args.budget,
        BLOCK_SIZE,
        args.repeats,
        args.seed + 1,
        MIXED_AIM,
    )
    print_mixed(mixed)
    profiles = {}
    if floor["percent_of_floor"] < FLOOR_AIM_PERCENT:
        profiles["1"] = bench_floor.profile_decode_step(model, 1, context, BLOCK_SIZE)
    missed = [
        r["concurrency"]
        for r in rows
        if r["target"] and spread_verdict(r["rounds"], r["target"]) != "ok"
    ]
    missed += [s["rows"] for s in steps if s["aim"] and s["ms"] / steps[0]["ms"] > s["aim"]]
    if missed:
        profiles[str(missed[0])] = bench_floor.profile_decode_step(
            model, missed[0], context, BLOCK_SIZE
        )
    for rows_, table in profiles.items():
        print(
            f"where the milliseconds of one decode step of {rows_} row(s) go (torch.profiler, "
            "by own CPU time):"
        )
        print(table)
    ok = (
        ratios_ok
        and not profiles
        and not problems
        and (
            "engine_vs_hf" not in mixed
            or spread_verdict(mixed["engine_vs_hf_rounds"], MIXED_AIM) == "ok"
        )
    )
    print(
        "all targets and aims met"
        if ok
        else "some targets or aims missed (see above); timings on a busy machine are noisy"
    )
    if args.save:
        result = dict(
            machine=dict(
                machine(), load_average_before=load_before, load_average_after=load_average()
            ),
            note=args.note,
            model=dict(cfg.__dict__, path=path.name),
            workload=dict(
                requests=len(prompts),
                prompt_lens=[lo, hi],
                max_tokens=args.max_tokens,
                repeats=args.repeats,
                budget=args.budget,
                seed=args.seed,
            ),
            one_at_a_time_tokens_per_s=base,
            single_request_latency_ratio=latency_ratio,
            single_request_latency_rounds=latency_rounds,
            latency_target=LATENCY_TARGET,
            rows=rows,
            floor=floor,
            step_times=steps,
            artifact_problems=problems,
            forms=forms,
            mixed=mixed,
            profiles=profiles,
            seconds={f"{n} @{c}": v for (n, c), v in seconds.items()},
            breakdown=breakdown,
            breakdown_rounds=breakdown_rounds,
        )
        Path(args.save).parent.mkdir(parents=True, exist_ok=True)
        Path(args.save).write_text(json.dumps(result, indent=2) + "\n")
        print(f"saved {args.save}")
    return 1 if problems else 0
