"""bench/report.py — the tables `python -m minillm bench` prints (the measuring is in
bench*.py)."""

from __future__ import annotations

import statistics


def spread_verdict(rounds: list[float], target: float, at_most: bool = False) -> str:
    """ "ok" when every round's ratio meets the target, "MISS" when none does, and "within
    noise" when the rounds fall on both sides of it: a median alone cannot tell those apart."""
    met = [r <= target if at_most else r >= target for r in rounds]
    return "ok" if all(met) else "MISS" if not any(met) else "within noise"


def print_table(
    base: float, rows: list[dict], latency_rounds: list[float], latency_target: float
) -> None:
    """Throughput vs concurrency, each ratio to one-at-a-time (the median of the rounds', each
    round's beside it), and the targets judged on every round's ratio."""
    hf = "hf_tokens_per_s" in rows[0]
    head = f"{'concurrency':>11} | {'engine tok/s':>12} | {'vs (a)':>7} | {'target':>7}"
    if hf:
        head += f" | {'HF generate tok/s':>17} | {'vs (a)':>7} | {'engine/HF':>9}"
    print(f"\n(a) one request at a time (kv_cache.generate): {base:.1f} output tokens/s")
    print(head + " | engine vs (a), each round\n" + "-" * len(head))
    for r in rows:
        t = f">= {r['target']:.1f}x" if r["target"] else ""
        ratio = r["engine_vs_one_at_a_time"]
        line = f"{r['concurrency']:>11} | {r['engine_tokens_per_s']:>12.1f} | {ratio:>6.2f}x"
        line += f" | {t:>7}"
        if hf:
            line += f" | {r['hf_tokens_per_s']:>17.1f} | {r['hf_vs_one_at_a_time']:>6.2f}x"
            line += f" | {r['engine_vs_hf']:>8.2f}x"
        line += " | " + " ".join(f"{x:.2f}x" for x in r["rounds"])
        print(line + (f" {spread_verdict(r['rounds'], r['target'])}" if r["target"] else ""))
    ratio = statistics.median(latency_rounds)
    print(
        f"single-request latency, engine at concurrency 1 / (a): {ratio:.3f}x (median; rounds "
        + " ".join(f"{x:.3f}x" for x in latency_rounds)
        + f"; target <= {latency_target}x) "
        + spread_verdict(latency_rounds, latency_target, at_most=True)
        + "\n"
    )


def print_breakdown(breakdown: dict) -> None:
    """Each contender's wall time per output token, split into its decode forwards, its
    forwards that carry a prompt, and the rest: the parts a throughput ratio is made of."""
    print("where the time goes, ms per output token (each one's median round):")
    print(f"{'':>14} | {'decode fwd':>10} | {'prompt fwd':>10} | {'rest':>6} | {'total':>6}")
    for name, b in breakdown.items():
        per = 1e3 / b["output_tokens"]
        parts = (b["decode_s"], b["prompt_s"], b["other_s"])
        print(
            f"{name:>14} | "
            + " | ".join(f"{x * per:>{w}.2f}" for x, w in zip(parts, (10, 10, 6)))
            + f" | {sum(parts) * per:>6.2f}"
        )
    print()


def print_floor(floor: dict, steps: list[dict]) -> None:
    """The memory floor of a bs-1 decode step, and one step's time against its rows."""
    print(
        f"streaming read bandwidth: {floor['bandwidth_gb_per_s']:.1f} GB/s "
        f"({floor['threads']} torch threads); "
        f"a decode step reads {floor['weight_bytes'] / 1e6:.0f} MB of weights"
    )
    verdict = "ok" if floor["percent_of_floor"] >= floor["aim_percent"] else "MISS"
    print(
        f"bs-1 decode floor: {floor['floor_ms']:.1f} ms per token (weight bytes / bandwidth); "
        "the engine's bs-1 "
        f"decode step: {floor['engine_decode_ms']:.1f} ms (forward {floor['forward_ms']:.1f} "
        "+ overhead "
        f"{floor['overhead_ms']:.1f}) = {floor['percent_of_floor']:.0f}% of the floor's speed "
        "(aim >= "
        f"{floor['aim_percent']}%; median of {floor['rounds']} rounds, bandwidth and step "
        f"measured in turn) {verdict}"
    )
    if "projections_ms" in floor:
        share = floor["projections_gb_per_s"] / floor["bandwidth_gb_per_s"]
        print(
            f"what limits it: the step's {floor['projection_calls']} projections take "
            f"{floor['projections_ms']:.1f} ms (torch.profiler), reading the weights at "
            f"{floor['projections_gb_per_s']:.1f} GB/s = {100 * share:.0f}% of the streaming "
            "bandwidth"
        )
        print(
            f"one profiled 1-row forward per round (medians): wall "
            f"{floor['profiled_wall_ms']:.1f} ms = operators {floor['operators_ms']:.1f} ms "
            f"(projections {floor['projections_ms']:.1f}, others "
            f"{floor['operators_ms'] - floor['projections_ms']:.1f}) + between operators "
            f"{floor['profiled_wall_ms'] - floor['operators_ms']:.1f} ms; unprofiled "
            f"{floor['forward_ms']:.1f} ms"
        )
    print(
        "\none decode step against its rows (weights are read once per step, whatever the "
        "rows):"
    )
    head = (
        f"{'rows':>4} | {'forward ms':>10} | {'weights GB/s':>12} | {'t(c)/t(1)':>9} | "
        f"{'c x t(1)/t(c)':>13} || {'engine step ms':>14} | {'overhead ms':>11}"
    )
    print(head + "\n" + "-" * len(head))

    def cell(value, width):
        return f"{value:>{width}.1f}" if value is not None else " " * width

    for s in steps:
        aim = s.get("aim")
        ratio = s["ms"] / steps[0]["ms"]
        verdict = (
            "" if not aim else f"  (aim <= {aim:.2f}) " + ("ok" if ratio <= aim else "MISS")
        )
        print(
            f"{s['rows']:>4} | {s['ms']:>10.1f} | {s['weights_gb_per_s']:>12.1f} | "
            f"{ratio:>9.2f} | {s['ceiling']:>12.2f}x || "
            f"{cell(s.get('engine_step_ms'), 14)} | {cell(s.get('overhead_ms'), 11)}{verdict}"
        )
    print(
        "forward ms: the median of the engine's pure-decode forwards of c rows in the timed\n"
        "runs (timed alone where the runs had none). c x t(1)/t(c): the most batching c\n"
        "requests can gain over one at a time at these step times (a ceiling only while\n"
        "t(c) >= t(1)). Right: the engine's median step (gap between tokens) at\n"
        "concurrency c, and what it adds to its forward.\n"
    )


def print_mixed(mixed: dict) -> None:
    """The mixed workload: the engine against transformers' static batches."""
    w = mixed["workload"]
    print(
        f"mixed workload: {w['requests']} requests, prompts of "
        f"{w['prompt_lens'][0]}-{w['prompt_lens'][1]} "
        f"tokens, max_tokens {w['max_tokens'][0]}-{w['max_tokens'][1]} drawn per request "
        f"({mixed['useful_output_tokens']} output tokens), concurrency {w['concurrency']}"
    )
    print(f"  engine (continuous batching): {mixed['engine_tokens_per_s']:.1f} output tokens/s")
    if "hf_tokens_per_s" in mixed:
        pad = mixed["padding"]
        rounds = mixed.get("engine_vs_hf_rounds", [mixed["engine_vs_hf"]])
        verdict = spread_verdict(rounds, mixed["aim"])  # judged on every round, as the targets
        print(
            f"  transformers generate (static batches of {w['concurrency']}, left-padded): "
            f"{mixed['hf_tokens_per_s']:.1f} output tokens/s; it computes "
            f"{pad['output_positions']} output "
            f"positions for {pad['useful_output_tokens']} wanted, {pad['prompt_positions']} "
            "prompt positions "
            f"for {pad['useful_prompt_tokens']}"
        )
        print(
            f"  engine / transformers: {mixed['engine_vs_hf']:.2f}x (median; rounds "
            + " ".join(f"{r:.2f}x" for r in rounds)
            + f"; aim >= {mixed['aim']:.0f}x) {verdict}"
        )
    if "hf_packed_tokens_per_s" in mixed:
        print(
            "  transformers generate with the engine's packed projections: "
            f"{mixed['hf_packed_tokens_per_s']:.1f} output tokens/s; engine / it: "
            f"{mixed['engine_vs_hf_packed']:.2f}x (all but the projections: chiefly "
            "scheduling, plus each side's attention and per-step loop; the rest of the gain "
            "over transformers as a user runs it is the kernels)"
        )
    for side, st in mixed.get("steps", {}).items():
        print(
            f"  {side:>9}, median round: {st['decode_forwards']} decode forwards of "
            f"{st['decode_rows']:.1f} rows, {st['decode_ms']:.1f} ms each; "
            f"{st['prompt_forwards']} forwards with a prompt, {st['prompt_ms']:.1f} ms each; "
            f"forwards {st['forward_s']:.2f} s of {st['wall_s']:.2f} s wall"
        )
    print()
