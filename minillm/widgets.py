"""widgets.py — how much a padded batch wastes: numbers, a figure, a notebook widget and a static-site snippet.

A padded batch is a [B, max_len] rectangle: every request's new tokens are stretched to the longest
one. A packed batch is the [N] row of the tokens that exist. `padding_waste` computes the numbers
(tests and the book site use it without a kernel); the figure and the ipywidgets UI draw them.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

PRESETS = {
    "mixed: 2 prefills + 6 decodes": [2000, 512, 1, 1, 1, 1, 1, 1],  # the source chapter's example
    "all decode": [1, 1, 1, 1, 1, 1, 1, 1],
    "all prefill": [512, 384, 640, 256, 768, 448, 320, 576],
}  # the same presets as the book site's docs/assets/padding-waste.js
MAX_REQUESTS = 16  # rows the widget offers
MAX_TOKENS = 32768  # new tokens one request may have in the widget


@dataclass(frozen=True)
class PaddingWaste:
    query_lens: tuple[int, ...]  # [B] new tokens per request this step
    padded_tokens: int  # B * max_len: positions a padded batch computes
    packed_tokens: int  # N = sum(query_lens): positions a packed batch computes

    @property
    def batch_size(self) -> int:
        return len(self.query_lens)

    @property
    def max_len(self) -> int:
        return max(self.query_lens)

    @property
    def wasted_tokens(self) -> int:
        return self.padded_tokens - self.packed_tokens

    @property
    def wasted_fraction(self) -> float:  # share of the padded work spent on padding
        return self.wasted_tokens / self.padded_tokens

    def summary(self) -> str:
        return (f"padded [{self.batch_size}, {self.max_len}] = {self.padded_tokens:,} token positions; "
                f"packed [N] = {self.packed_tokens:,} tokens; {self.wasted_fraction:.0%} of the padded work is padding")


def padding_waste(query_lens) -> PaddingWaste:
    """Padded vs packed token counts for requests with these numbers of new tokens."""
    lens = list(query_lens)
    if not lens:
        raise ValueError("query_lens is empty: expected at least one request")
    bad = [n for n in lens if isinstance(n, bool) or not isinstance(n, int) or n < 1]
    if bad:
        raise ValueError(f"query_lens holds {bad[0]!r}: expected ints >= 1 (every request computes a new token)")
    return PaddingWaste(tuple(lens), len(lens) * max(lens), sum(lens))


def padding_waste_figure(query_lens, figsize=(10, 3.2)):
    """The padded [B, max_len] layout beside the packed [N] one, drawn to the same token scale."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import ListedColormap

    w = padding_waste(query_lens)
    B, L, N = w.batch_size, w.max_len, w.packed_tokens
    padded = np.full((B, L), np.nan)  # NaN marks padding
    for i, n in enumerate(w.query_lens):
        padded[i, :n] = i % 10
    packed = (np.repeat(np.arange(B) % 10, w.query_lens))[None, :]  # [1, N]: one flat row, no padding

    cmap = ListedColormap(plt.get_cmap("tab10").colors).with_extremes(bad="#d9d9d9")
    fig, (ax_pad, ax_pack) = plt.subplots(1, 2, figsize=figsize, width_ratios=[L, N], sharey=True)
    for ax, grid, rows, title in (
        (ax_pad, padded, B, f"padded [B={B}, max_len={L:,}]: {w.padded_tokens:,} positions"),
        (ax_pack, packed, 1, f"packed [N={N:,}]: {N:,} tokens, nothing else"),
    ):
        ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=9, aspect="auto", interpolation="nearest",
                  extent=(0, grid.shape[1], rows, 0))
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("token position in the batch (tokens)")
    ax_pad.set_ylim(B, 0)  # both panels on the same row scale: equal areas mean equal work
    ax_pad.set_ylabel("request (row of the padded batch)")
    ax_pad.set_yticks(np.arange(B) + 0.5, [str(i) for i in range(B)] if B <= 16 else [""] * B)
    fig.suptitle(f"same tokens, {w.wasted_fraction:.0%} of the padded batch is padding (grey)", fontsize=11)
    fig.tight_layout()
    return fig


def padding_waste_widget(query_lens=PRESETS["mixed: 2 prefills + 6 decodes"]):
    """ipywidgets UI: a preset menu, the number of requests, each request's new tokens; redraws on change."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    lens = list(padding_waste(query_lens).query_lens)[:MAX_REQUESTS]
    preset = widgets.Dropdown(options=[*PRESETS, "custom"], description="preset", layout=widgets.Layout(width="330px"),
                              value=next((k for k, v in PRESETS.items() if v == lens), "custom"))
    count = widgets.IntSlider(value=len(lens), min=1, max=MAX_REQUESTS, description="requests")
    boxes = [widgets.BoundedIntText(value=lens[i] if i < len(lens) else 1, min=1, max=MAX_TOKENS,
                                    description=f"request {i}", style={"description_width": "70px"},
                                    layout=widgets.Layout(width="170px"))
             for i in range(MAX_REQUESTS)]
    out = widgets.Output()
    busy = [False]  # a preset sets many controls at once: redraw only after the last

    def redraw(*_):
        if busy[0]:
            return
        for i, box in enumerate(boxes):
            box.layout.display = None if i < count.value else "none"
        current = [b.value for b in boxes[:count.value]]
        with out:
            out.clear_output(wait=True)
            fig = padding_waste_figure(current)
            display(fig)
            plt.close(fig)
            print(padding_waste(current).summary())

    def apply_preset(change):
        if change["new"] == "custom":
            return
        busy[0] = True
        values = PRESETS[change["new"]]
        count.value = len(values)
        for box, v in zip(boxes, values):
            box.value = v
        busy[0] = False
        redraw()

    def edited(_):
        if not busy[0]:
            preset.value = "custom"
        redraw()

    preset.observe(apply_preset, names="value")
    count.observe(edited, names="value")
    for box in boxes:
        box.observe(edited, names="value")
    redraw()
    grid = widgets.GridBox(boxes, layout=widgets.Layout(grid_template_columns="repeat(auto-fill, 180px)"))  # wraps
    return widgets.VBox([widgets.HBox([preset, count]), grid, out])


def padding_waste_html(query_lens) -> str:
    """A static snippet for the book site: a table now; the site's script turns the div into a live control.

    Contract with the site: class "minillm-padding-waste", attribute data-query-lens = comma-separated ints.
    """
    w = padding_waste(query_lens)
    rows = "".join(f"<tr><td>{i}</td><td>{n:,}</td><td>{w.max_len - n:,}</td></tr>" for i, n in enumerate(w.query_lens))
    return (
        f'<div class="minillm-padding-waste" data-query-lens="{",".join(map(str, w.query_lens))}">'
        "<table><thead><tr><th>request</th><th>new tokens</th><th>padding to max_len</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
        f"<p>{html.escape(w.summary())}</p></div>"
    )
