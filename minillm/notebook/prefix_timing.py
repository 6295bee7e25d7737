"""Chapter 7's timing harness: whole runs with prefix caching off and on, their time split by
kind of step, and one forward with and without a cached prefix. Timings only; no asserts."""

import statistics
import time

from minillm.engine import LLMEngine
from minillm.runner import build_batch


def step_kind(plan) -> str:
    """'prompt' for a step with any prompt tokens, 'decode' for a step of decodes only."""
    return "prompt" if any(c.kind != "decode" for c in plan.chunks) else "decode"


def timed_run(model, prompts, params, enable: bool, **engine_args) -> tuple[float, dict]:
    """One run through a fresh engine, stepped by hand (engine.generate's loop):
    (seconds in all, {kind: seconds summed over the steps of that kind})."""
    engine = LLMEngine(model, enable_prefix_caching=enable, record_plans=True, **engine_args)
    for p in prompts:
        engine.add_request(p, params)
    by_kind = {"prompt": 0.0, "decode": 0.0}
    start = time.perf_counter()
    while engine.has_unfinished():
        t = time.perf_counter()
        engine.step()
        by_kind[step_kind(engine.plans[-1])] += time.perf_counter() - t
    return time.perf_counter() - start, by_kind


def interleaved_runs(model, prompts, params, rounds: int = 10, **engine_args) -> dict:
    """A warm-up run of each, then `rounds` rounds of off, on:
    {enable: [(seconds, by_kind), ...]}."""
    for enable in (False, True):
        timed_run(model, prompts, params, enable, **engine_args)
    runs = {False: [], True: []}
    for _ in range(rounds):  # interleaved, so drift hits both alike
        for enable in (False, True):
            runs[enable].append(timed_run(model, prompts, params, enable, **engine_args))
    return runs


def forward_times(model, prompt: list[int], new_counts, rounds: int = 12) -> dict:
    """{n: median seconds of one forward of prompt's last n tokens, the rest already in the
    KV cache}, over `rounds` - 1 interleaved rounds (the first is a warm-up)."""
    engine = LLMEngine(model)
    seq = engine.make_sequence(prompt)
    engine.scheduler.kv.allocate_slots(seq, seq.num_tokens)
    batches = {
        n: build_batch(
            [(prompt[-n:], len(prompt) - n, seq.block_table, True)], engine.block_size
        )
        for n in new_counts
    }
    times = {n: [] for n in batches}
    for _ in range(rounds):
        for n, batch in batches.items():
            t = time.perf_counter()
            engine.runner.forward(batch)
            times[n].append(time.perf_counter() - t)
    return {n: statistics.median(v[1:]) for n, v in times.items()}
