"""phase_timing.py — chapter 5's "one forward for every phase": one mixed forward of a step
against the forwards it replaces, and the output layer's part in each.

The arms run on one runner and cache, interleaved round by round, so that each round's times
pair up: a ratio is taken within a round, and its range over the rounds says how far it moves.
"""

from __future__ import annotations

import textwrap

import torch

from minillm.model import Transformer
from minillm.notebook.padding_timing import interleaved_rounds
from minillm.paged import PagedAttention
from minillm.runner import ModelRunner, build_batch

ARMS = {  # arm -> its output layer's timing
    "mixed": "head mixed",
    "separate": "head split",
    "same path": "head split",
    "every row": "head every",
}


class VarlenOnly(PagedAttention):
    """PagedAttention that never takes the batched decode path: a call per request, always."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.decode_only = False


def on_general_path(runner: ModelRunner, fn):
    """fn, with every forward of the runner on `VarlenOnly`."""

    def run():
        backend = runner.backend_class
        runner.backend_class = VarlenOnly
        try:
            fn()
        finally:
            runner.backend_class = backend

    return run


def split_step(items: list, block_size: int):
    """The step's decodes as one batch, each prompt chunk as a batch of its own, and the whole
    step with logits for every new token (`need_logits` as a count: the whole chunk)."""
    decodes = build_batch([it for it in items if len(it[0]) == 1], block_size)
    chunks = [build_batch([it], block_size) for it in items if len(it[0]) > 1]
    every = build_batch([(ids, k, table, len(ids)) for ids, k, table, _ in items], block_size)
    return decodes, chunks, every


def phase_rounds(
    runner: ModelRunner, model: Transformer, items: list, rounds: int
) -> dict[str, list[float]]:
    """Seconds per round of each arm of `ARMS` over the step `items`, and of the output layer
    (`norm` + `lm_head` on random rows) as each arm runs it: one product on the mixed step's
    rows, one on the decodes' rows plus one row per chunk, one on every new token's row."""
    bs = runner.kv.block_size
    mixed = build_batch(items, bs)
    decodes, chunks, every = split_step(items, bs)

    def separate():  # 1 + len(chunks) forwards over the same tokens, slots and block tables
        runner.forward(decodes)
        for chunk in chunks:
            runner.forward(chunk)

    @torch.no_grad()  # as in the forward: without it, linear falls back to F.linear
    def head(rows):  # [rows, hidden] -> [rows, vocab]
        return model.lm_head(model.norm(torch.randn(rows, model.cfg.hidden_size)))

    M, M_dec = len(mixed.logits_indices), len(decodes.logits_indices)
    return interleaved_rounds(
        {
            "mixed": lambda: runner.forward(mixed),
            "separate": separate,
            "same path": on_general_path(runner, separate),
            "every row": lambda: runner.forward(every),
            "head mixed": lambda: head(M),
            "head split": lambda: [head(M_dec)] + [head(1) for _ in chunks],
            "head every": lambda: head(every.num_tokens),
            "head 1": lambda: head(1),
        },
        rounds=rounds,
    )


def ratio_stats(times: dict[str, list[float]], arm: str, base: str = "mixed"):
    """(lowest, median, highest) of arm / base, each ratio taken within one round."""
    ratios = sorted(a / b for a, b in zip(times[arm], times[base]))
    return ratios[0], ratios[len(ratios) // 2], ratios[-1]


def phase_table(times: dict[str, list[float]], what: dict[str, str]) -> str:
    """Each arm's fastest round, its output layer's (timed alone), and arm / mixed round by
    round; then what the 4 more forwards of "same path" cost and their output layer's part."""
    fast = {name: min(ts) * 1e3 for name, ts in times.items()}  # ms
    lines = [
        f"{'arm':<11}{'what runs':<36}{'fastest':>9}{'output layer':>14}"
        "   / mixed, round by round: median (range)"
    ]
    for arm, head in ARMS.items():
        lo, med, hi = ratio_stats(times, arm)
        ratio = "baseline" if arm == "mixed" else f"{med:.2f}x ({lo:.2f}x to {hi:.2f}x)"
        lines.append(
            f"{arm:<11}{what[arm]:<36}{fast[arm]:>6.1f} ms{fast[head]:>11.1f} ms   {ratio}"
        )
    more, heads = fast["same path"] - fast["mixed"], fast["head split"] - fast["head mixed"]
    lines.append(
        f"'same path' - 'mixed': {more:.1f} ms; of it, the output layer as 5 products instead "
        f"of 1: {heads:.1f} ms ({heads / more:.0%}); one product on 1 row: "
        f"{fast['head 1']:.2f} ms"
    )
    return "\n".join(lines)


def phase_figure(times: dict[str, list[float]], labels: dict[str, str]):
    """One bar per arm, its fastest round: the output layer (as the arm runs it, timed alone)
    below, the rest of the forward above, and the arm / mixed ratio (median and range over the
    rounds) on top."""
    import matplotlib.pyplot as plt

    fast = {name: min(ts) * 1e3 for name, ts in times.items()}  # ms
    arms = list(ARMS)
    head = [min(fast[ARMS[a]], fast[a]) for a in arms]
    rest = [fast[a] - h for a, h in zip(arms, head)]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    x = range(len(arms))
    ax.bar(x, head, color="tab:red", label="output layer (norm + lm_head), timed alone")
    ax.bar(x, rest, bottom=head, color="tab:gray", label="the rest of the forward(s)")
    for i, a in enumerate(arms):
        lo, med, hi = ratio_stats(times, a)
        note = "baseline" if a == "mixed" else f"{med:.2f}x\n({lo:.2f}x to {hi:.2f}x)"
        ax.text(i, fast[a], note, ha="center", va="bottom", fontsize=9)
    ticks = [f"{a}\n" + textwrap.fill(labels[a], 22) for a in arms]
    ax.set_xticks(list(x), ticks, fontsize=8)
    ax.set_ylabel("ms, fastest round (one CPU thread)")
    ax.set_ylim(0, max(fast[a] for a in arms) * 1.2)
    ax.set_title(
        "one step, four ways; on top: time / mixed, median (range) over the rounds", fontsize=10
    )
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return fig


def decode_path_rounds(runner: ModelRunner, decodes, rounds: int = 21):
    """The decode-only forward on the batched path (`PagedAttention.decode`, one call) and on
    the general one (`VarlenOnly`, a call per request): seconds per round of each, one call of
    each per round, the order swapped every round."""
    paths = {
        "batched": lambda: runner.forward(decodes),
        "general": on_general_path(runner, lambda: runner.forward(decodes)),
    }
    times = {name: [] for name in paths}
    for r in range(rounds):
        order = dict(reversed(paths.items())) if r % 2 else paths
        for name, ts in interleaved_rounds(order, rounds=1).items():
            times[name] += ts
    return times
