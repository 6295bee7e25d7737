"""layout_figure.py — chapter 5's picture of one step's flat batch and where its K/V go.

The top row is the flat batch (every new token, request after request, labelled with its
position), with `query_start_loc` as ticks; below it is the paged pool, and one arrow per
`slot_mapping` entry joins a token to the slot its key and value are written to.
"""

from __future__ import annotations

from minillm.paged import slot_mapping_for
from minillm.runner import BatchInput


def flat_layout_figure(batch: BatchInput, names: list[str], colors: list[str]):
    """Draw `batch`'s flat row and its slots in the pool: request r in colors[r], named
    names[r]. Slots that earlier steps wrote (each request's first seq_len - n positions) are
    drawn faded in the request's colour, free slots light grey. Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.legend_handler import HandlerTuple
    from matplotlib.patches import FancyArrowPatch, Rectangle

    bs, qsl = batch.block_size, batch.query_start_loc
    positions, slots = batch.positions.tolist(), batch.slot_mapping.tolist()
    new = [qsl[r + 1] - qsl[r] for r in range(batch.num_reqs)]  # [B] new tokens
    owner = [r for r in range(batch.num_reqs) for _ in range(new[r])]  # [N] request of a token
    pool_w = (1 + max(b for t in batch.block_tables for b in t)) * bs  # one unit per slot
    row_w = pool_w / batch.num_tokens  # the flat row drawn as wide as the pool
    cached = {}  # slot -> request, for K/V that earlier steps wrote: positions before the new
    for r, (table, seq_len) in enumerate(zip(batch.block_tables, batch.seq_lens)):
        cached.update(
            dict.fromkeys(slot_mapping_for(table, list(range(seq_len - new[r])), bs), r)
        )
    written = dict(zip(slots, owner))

    fig, ax = plt.subplots(figsize=(11, 4.8))
    for i, (r, p) in enumerate(zip(owner, positions)):  # the packed row: a cell per new token
        ax.add_patch(
            Rectangle((i * row_w, 3), row_w, 1, facecolor=colors[r], edgecolor="white")
        )
        ax.text((i + 0.5) * row_w, 3.5, str(p), ha="center", va="center", color="w", fontsize=8)
    for k, q in enumerate(qsl):  # where each request's tokens begin, and N at the end
        top = 4.25 + 0.4 * (k % 2)  # alternate heights: two ticks can be a single token apart
        ax.plot([q * row_w] * 2, [2.75, top], color="black", lw=1.5)
        label = f"query_start_loc[{k}] = {q}"
        ax.text(q * row_w, top + 0.05, label, ha="center", va="bottom", fontsize=8)
    for s in range(pool_w):  # the pool's slots: written now (solid), earlier (faded), free
        r = written.get(s, cached.get(s))
        color = "whitesmoke" if r is None else colors[r]
        alpha = 1.0 if s in written else 0.35
        ax.add_patch(Rectangle((s, 0), 1, 1, facecolor=color, alpha=alpha, edgecolor="white"))
    for blk in range(pool_w // bs):
        ax.add_patch(Rectangle((blk * bs, 0), bs, 1, fill=False, edgecolor="black", lw=1.2))
        ax.text((blk + 0.5) * bs, -0.3, f"block {blk}", ha="center", va="top", fontsize=8)
    for i, (r, s) in enumerate(zip(owner, slots)):  # one arrow per slot_mapping entry
        arrow = FancyArrowPatch(
            ((i + 0.5) * row_w, 2.95), (s + 0.5, 1.05), arrowstyle="-|>", mutation_scale=8
        )
        arrow.set(color=colors[r], lw=0.8, alpha=0.8)
        ax.add_patch(arrow)
    ax.set_xlim(-2, pool_w + 2)
    ax.set_ylim(-1, 5.2)
    ax.set_yticks([0.5, 3.5], ["KV pool\n(slots)", "flat batch\n(positions)"])
    ax.set_xticks([])
    ax.spines[["top", "right", "bottom"]].set_visible(False)
    handles = [Rectangle((0, 0), 1, 1, color=c) for c in colors] + [
        # written earlier: each request's colour, faded as in the pool; then a free slot
        tuple(Rectangle((0, 0), 1, 1, color=c, alpha=0.35) for c in colors),
        Rectangle((0, 0), 1, 1, facecolor="whitesmoke", edgecolor="lightgray"),
    ]
    ax.legend(
        handles,
        [*names, "K/V written in an earlier step (faded)", "free slot"],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.08),
        ncol=len(handles),
        fontsize=8,
        handler_map={tuple: HandlerTuple(ndivide=None, pad=0)},
    )
    ax.set_title(
        f"one step's {batch.num_tokens} new tokens end to end; each arrow is one slot_mapping "
        f"entry (block_size {bs})"
    )
    fig.tight_layout()
    return fig
