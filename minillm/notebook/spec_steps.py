"""notebook/spec_steps.py — chapter 9's batch-8 n-gram loss, taken apart into measured parts.

Every target forward of a run is timed and filed by what it carries: only decode rows, only
verify rows (and decodes beside them), only prompt chunks, or both prompt chunks and rows (a
*mixed* step: queued prompts entering while the others verify). A mixed step is timed whole, as
the engine runs it, and as its prompt chunks alone and as its rows alone, the parts first: a
forward over some of a step's requests reads the same context and writes K/V into the same
slots, and the whole step, run last, writes them again as the engine would, so timing the parts
leaves the run, and its tokens, unchanged.

Then a run's forward time is prompt work + row work + sharing, where sharing is what the mixed
steps saved by reading the weights once for both parts (their whole time less their parts'),
and the difference between two runs splits the same way.
"""

from __future__ import annotations

import statistics
import time

import torch

from minillm.bench.spec import spec_engine
from minillm.runner import BatchInput
from minillm.sampling import SamplingParams

PARTS = ("prompt", "rows", "sharing")


def sub_batch(batch: BatchInput, keep: list[int]) -> BatchInput:
    """The step's requests `keep` alone: their tokens, slots, block tables and logits rows."""
    qsl, picks, starts, logits = batch.query_start_loc, [], [0], []
    rows = batch.logits_indices.tolist()
    for i in keep:
        a, b = qsl[i], qsl[i + 1]
        logits += [starts[-1] + j - a for j in rows if a <= j < b]  # renumbered in the subset
        picks += range(a, b)
        starts.append(starts[-1] + b - a)
    idx = torch.tensor(picks, dtype=torch.long)
    return BatchInput(
        batch.input_ids[idx],
        batch.positions[idx],
        batch.slot_mapping[idx],
        starts,
        [batch.seq_lens[i] for i in keep],
        [batch.block_tables[i] for i in keep],
        torch.tensor(logits, dtype=torch.long),
        batch.block_size,
    )


def step_parts(batch: BatchInput) -> tuple[list[int], list[int]]:
    """Which requests bring prompt chunks (fewer logits rows than tokens) and which bring rows
    (a logits row at every token: a decode or a verify)."""
    rows = batch.logits_indices.tolist()
    prompt, with_rows = [], []
    for i in range(batch.num_reqs):
        a, b = batch.query_start_loc[i], batch.query_start_loc[i + 1]
        (with_rows if sum(a <= j < b for j in rows) == b - a else prompt).append(i)
    return prompt, with_rows


def timed_parts(forward, log: dict):
    """forward, each call timed and filed into log[kind] = [steps, ms]; a mixed step also adds
    its prompt chunks alone to log["mixed: prompt"] and its rows alone to log["mixed: rows"]."""

    def clock(f, *args):
        t0 = time.perf_counter()
        out = f(*args)
        return out, (time.perf_counter() - t0) * 1e3

    def add(kind, ms):
        entry = log.setdefault(kind, [0, 0.0])
        entry[0] += 1
        entry[1] += ms

    def timed(batch):
        prompt, with_rows = step_parts(batch)
        if prompt and with_rows:  # the parts first: the whole step's K/V are the ones kept
            add("mixed: prompt", clock(forward, sub_batch(batch, prompt))[1])
            add("mixed: rows", clock(forward, sub_batch(batch, with_rows))[1])
        logits, ms = clock(forward, batch)  # the step as the engine runs it
        if prompt and with_rows:
            add("mixed", ms)
        elif prompt:
            add("prompt", ms)
        else:
            n_tokens, n_reqs = batch.num_tokens, batch.num_reqs
            add("decode" if n_tokens == n_reqs else "verify", ms)
        return logits

    return timed


def one_run(model, prompts, max_tokens: int, concurrency: int, spec: dict | None):
    """A fresh engine as `minillm bench --speculative` builds it; returns (log, tokens)."""
    engine = spec_engine(model, prompts, max_tokens, concurrency, spec)
    log: dict[str, list] = {}
    engine.runner.forward = timed_parts(engine.runner.forward, log)
    outs = engine.generate(
        prompts, SamplingParams(max_tokens=max_tokens, ignore_eos=True), progress=False
    )
    return log, [o.token_ids for o in outs]


def parts_of(log: dict) -> dict[str, float]:
    """A run's forward ms as prompt work + row work + sharing (negative: the mixed steps cost
    less than their two parts run apart)."""
    ms = lambda kind: log.get(kind, [0, 0.0])[1]  # noqa: E731
    return dict(
        prompt=ms("prompt") + ms("mixed: prompt"),
        rows=ms("decode") + ms("verify") + ms("mixed: rows"),
        sharing=ms("mixed") - ms("mixed: prompt") - ms("mixed: rows"),
        total=ms("prompt") + ms("decode") + ms("verify") + ms("mixed"),
    )


def loss_passes(model, prompts, max_tokens, concurrency, spec, passes: int) -> list[dict]:
    """`passes` pairs of runs, plain then `spec`, each pair's logs and parts; the tokens must
    be the same in every run."""
    out, want = [], None
    for _ in range(passes):
        pair = {}
        for name, s in (("plain", None), ("spec", spec)):
            log, tokens = one_run(model, prompts, max_tokens, concurrency, s)
            want = tokens if want is None else want
            if tokens != want:
                raise AssertionError(f"{name}: tokens differ from the first run's")
            pair[name] = dict(log=log, parts=parts_of(log))
        out.append(pair)
    return out


def print_loss(passes: list[dict]) -> dict:
    """The median pass (by the loss) in full, then each part's difference pass by pass; returns
    the median pass."""
    loss = lambda p: p["spec"]["parts"]["total"] - p["plain"]["parts"]["total"]  # noqa: E731
    med = sorted(passes, key=loss)[len(passes) // 2]
    for name in ("plain", "spec"):
        log, parts = med[name]["log"], med[name]["parts"]
        steps = ", ".join(
            f"{n} {kind} {ms:.0f} ms" for kind, (n, ms) in log.items() if ":" not in kind
        )
        print(f"  {name:<5} {parts['total']:5.0f} ms in forwards: {steps}")
    log = med["spec"]["log"]
    if "mixed" in log:
        (n, whole), (_, p), (_, r) = log["mixed"], log["mixed: prompt"], log["mixed: rows"]
        print(
            f"  its {n} mixed steps: {whole:.0f} ms whole; their prompt chunks alone "
            f"{p:.0f} ms, their rows alone {r:.0f} ms"
        )
    for name in ("plain", "spec"):  # the forwards that carried rows, and their mean cost
        log = med[name]["log"]
        n = sum(log.get(kind, [0, 0.0])[0] for kind in ("decode", "verify", "mixed: rows"))
        print(
            f"  {name:<5} rows: {n} forwards, {med[name]['parts']['rows'] / n:.1f} ms each "
            "(decode, verify and mixed steps' rows)"
        )
    print("  forward ms   |  plain |   spec | spec - plain (every pass)")
    for part in (*PARTS, "total"):
        a, b = med["plain"]["parts"][part], med["spec"]["parts"][part]
        every = [q["spec"]["parts"][part] - q["plain"]["parts"][part] for q in passes]
        print(
            f"  {part:<12} | {a:6.0f} | {b:6.0f} | {b - a:+6.0f} ("
            + ", ".join(f"{x:+.0f}" for x in every)
            + ")"
        )
    print(
        f"  the median pass of {len(passes)}: forward time "
        f"{med['plain']['parts']['total']:.0f} against {med['spec']['parts']['total']:.0f} ms, "
        f"{med['plain']['parts']['total'] / med['spec']['parts']['total']:.2f}x"
    )
    return med


def median_parts(passes: list[dict], name: str) -> dict[str, float]:
    return {
        part: statistics.median(p[name]["parts"][part] for p in passes)
        for part in (*PARTS, "total")
    }
