"""scheduler_runs.py — chapter 6's picture of step plans and its token-budget run.

The chapter shows what these print and draw; the plotting and the bookkeeping live here, so that
its cells read as experiments.
"""

from __future__ import annotations

import random
import statistics
import time

import matplotlib.pyplot as plt

from minillm.engine import LLMEngine
from minillm.sampling import SamplingParams

COLORS = {"prefill": "tab:blue", "decode": "tab:green", "recompute": "tab:orange"}
# a chunk's tokens, written in its bar
NUMBER = dict(ha="center", va="center", fontsize=7, color="white")


def gantt(plans, title, ax=None):
    """One row per request, one column per step: blue = prompt chunk (its tokens written in it),
    green = decode, orange = recompute; a red cross marks a preemption."""
    ids = sorted(
        {c.request_id for p in plans for c in p.chunks}
        | {r for p in plans for r in p.preempted},
        key=lambda r: int(r.split("-")[1]),  # "req-10" after "req-9"
    )
    row = {r: i for i, r in enumerate(ids)}
    ax = ax or plt.subplots(figsize=(10, 0.45 * len(ids) + 1.2))[1]
    for p in plans:
        for c in p.chunks:
            ax.barh(row[c.request_id], 1, left=p.step - 0.5, color=COLORS[c.kind], ec="white")
            if c.kind != "decode":  # a chunk's size is what the budget shares out
                ax.text(p.step, row[c.request_id], str(c.num_new), **NUMBER)
        for r in p.preempted:
            ax.plot(p.step, row[r], "rx", markersize=9, mew=2)
    ax.set_yticks(range(len(ids)), ids)
    ax.invert_yaxis()
    ax.set_xlabel("engine step")
    ax.set_title(title)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    handles.append(plt.Line2D([], [], color="r", marker="x", ls="", mew=2))
    labels = ["prompt chunk (tokens)", "decode", "recompute (tokens)", "preempted"]
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    return ax


def _decodes(plan, request_id) -> bool:
    """Whether the step carries this request's decode."""
    return any(c.kind == "decode" and c.request_id == request_id for c in plan.chunks)


def budget_run(model, budget: int) -> dict:
    """Four chatty requests (8-token prompts, 40 new tokens) decode for 3 steps; then four long
    prompts (160 tokens, 4 new tokens) arrive. Runs to the end at `max_num_batched_tokens =
    budget` and returns what the chapter plots: step counts (the same on every machine) and the
    times (ms) of the long prompts' first tokens and of the chatty requests' gaps."""
    engine = LLMEngine(model, max_num_batched_tokens=budget, max_num_seqs=8, record_plans=True)
    rng = random.Random(3)  # the same prompts at every budget
    chatty = [
        engine.add_request(
            [rng.randrange(1000) for _ in range(8)], SamplingParams(max_tokens=40)
        )
        for _ in range(4)
    ]
    start = time.perf_counter()
    for _ in range(3):
        engine.step()
    arrival = engine.scheduler.num_steps
    long = [
        engine.add_request(
            [rng.randrange(1000) for _ in range(160)], SamplingParams(max_tokens=4)
        )
        for _ in range(4)
    ]
    outputs = {}
    while engine.has_unfinished():
        outputs.update({ev.request_id: ev.output for ev in engine.step() if ev.output})
    wall = time.perf_counter() - start

    first_token_step = {}  # the step whose chunk reached a long prompt's last token
    for p in engine.plans:
        for c in p.chunks:
            if c.request_id in long and c.need_logits:
                first_token_step.setdefault(c.request_id, p.step)
    # the steps that carry a chatty request's decode: each ends one of its gaps
    decode_plans = [p for p in engine.plans if any(_decodes(p, r) for r in chatty)]
    # the chatty requests' gaps in ms, by the step that ended them: with a prompt chunk or not
    chunk_gaps, plain_gaps = [], []
    for r in chatty:
        mine = [p for p in decode_plans if _decodes(p, r)]
        assert len(mine) == len(outputs[r].itl)  # one step per gap
        for p, gap in zip(mine, outputs[r].itl):
            prompt = any(c.kind != "decode" for c in p.chunks)
            (chunk_gaps if prompt else plain_gaps).append(1e3 * gap)
    # the first chatty request's steps after the long prompts arrive (its steps before then
    # carry the other chatty prompts' chunks)
    after = [p for p in decode_plans if p.step > arrival and _decodes(p, chatty[0])]
    return dict(
        steps_to_first=sum(first_token_step[r] - arrival for r in long) / len(long),
        largest_decode_step=max(p.num_tokens for p in decode_plans),
        steps_after=len(after),
        steps_with_prompt=sum(any(c.kind != "decode" for c in p.chunks) for p in after),
        ttft_ms=1e3 * sum(outputs[r].ttft for r in long) / len(long),
        itl_ms=1e3 * max(max(outputs[r].itl) for r in chatty),
        mean_itl_ms=1e3 * statistics.mean(statistics.mean(outputs[r].itl) for r in chatty),
        chunk_gaps_ms=chunk_gaps,
        plain_gaps_ms=plain_gaps,
        tokens_per_s=sum(len(o.token_ids) for o in outputs.values()) / wall,  # all 8 requests
    )
