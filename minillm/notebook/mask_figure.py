"""mask_figure.py — chapter 5's picture of which keys each query of a flat batch reads.

The chapter shows the figure, not the code that builds the mask: building it is part of an
exercise, so the builder is private.
"""

from __future__ import annotations

import torch

from minillm.runner import BatchInput


def _read_mask(batch: BatchInput) -> torch.Tensor:
    """[N, S] with S = sum(seq_lens), every request's context side by side: r + 1 where request
    r's query may read the key, 0 where it may not (another request's key, or a later one)."""
    qsl, seq_lens = batch.query_start_loc, batch.seq_lens
    mask = torch.zeros(batch.num_tokens, sum(seq_lens))
    key_start = 0  # where request r's keys begin
    for r, seq_len in enumerate(seq_lens):
        n = qsl[r + 1] - qsl[r]
        for j in range(n):  # new token j sits at position seq_len - n + j
            mask[qsl[r] + j, key_start : key_start + seq_len - n + j + 1] = r + 1
        key_start += seq_len
    return mask


def read_mask_figure(batch: BatchInput, names: list[str], colors: list[str]):
    """The figure of `_read_mask(batch)`: request r drawn in colors[r] and labelled names[r]."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    mask, qsl, seq_lens = _read_mask(batch), batch.query_start_loc, batch.seq_lens
    key_start = [sum(seq_lens[:r]) for r in range(len(seq_lens))]
    owner = [names[r] for r in range(len(seq_lens)) for _ in range(qsl[r + 1] - qsl[r])]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    ax.imshow(
        mask,
        cmap=ListedColormap(["whitesmoke", *colors]),
        vmin=0,
        vmax=len(colors),
        aspect="auto",
        interpolation="nearest",
    )
    for r in range(len(seq_lens)):
        ax.axvline(key_start[r] - 0.5, color="black", lw=0.8)
        ax.axhline(qsl[r] - 0.5, color="black", lw=0.8)
    ax.set_xticks(
        [key_start[r] + seq_lens[r] / 2 - 0.5 for r in range(len(seq_lens))],
        [f"{name}: 0..{seq_lens[r] - 1}" for r, name in enumerate(names)],
    )
    positions = batch.positions.tolist()
    ax.set_yticks(
        range(len(owner)), [f"{o} @ {p}" for o, p in zip(owner, positions)], fontsize=7
    )
    ax.set_xlabel(
        "keys: each request's context after this step (positions), read from its blocks"
    )
    ax.set_ylabel("queries: flat token (request @ position)")
    ax.set_title(
        "which keys each query reads: block diagonal, each block causal and aligned to its end",
        fontsize=10,
    )
    fig.tight_layout()
    return fig, mask
