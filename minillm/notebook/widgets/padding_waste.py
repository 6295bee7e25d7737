"""padding_waste.py — how much a padded batch wastes: numbers, a figure and a notebook widget.

A padded batch is a [B, max_len] rectangle: every request's new tokens are stretched to the
longest one. A packed batch is the [N] row of the tokens that exist. `padding_waste` computes
the numbers (tests use it without a kernel); the figure and the ipywidgets UI draw them. The
book site draws the same thing with docs/assets/padding-waste.js, from the same presets and the
same summary line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from minillm.checking import check_int
from minillm.notebook.widgets.live import fmt_int, fmt_percent

PRESETS = {
    "mixed: 2 prefills + 6 decodes": [2000, 512, 1, 1, 1, 1, 1, 1],  # chapter 5's example
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
        """One line; the site's control prints the same line for the same lengths."""
        return (
            f"padded [B={self.batch_size}, max_len={fmt_int(self.max_len)}] = "
            f"{fmt_int(self.padded_tokens)} "
            f"positions; packed [N={fmt_int(self.packed_tokens)}]: "
            f"{fmt_percent(self.wasted_fraction)} of the padded work is padding"
        )


def padding_waste(query_lens) -> PaddingWaste:
    """Padded vs packed token counts for requests with these numbers of new tokens."""
    lens = list(query_lens)
    if not lens:
        raise ValueError("query_lens is empty: expected at least one request")
    bad = [n for n in lens if isinstance(n, bool) or not isinstance(n, int) or n < 1]
    if bad:
        raise ValueError(
            f"query_lens holds {bad[0]!r}: expected ints >= 1 (every request computes a new "
            "token)"
        )
    return PaddingWaste(tuple(lens), len(lens) * max(lens), sum(lens))


def padding_waste_figure(query_lens, width: float = 9.0, min_width: int = 0):
    """The padded [B, max_len] rectangle above the packed [N] row, drawn to one token scale.

    The packed row is wrapped at max_len tokens per line, so both panels share the x axis and
    every row has the same height: equal coloured areas mean equal work, and the grey is the
    padding. A request of one token is a sliver at this scale; every bar gets an outline so that
    it stays visible.

    min_width (tokens, default 0: off): a request with fewer tokens is drawn this wide in both
    panels, the packed row laid end to end with the widened bars, and a note under the figure
    names those requests. The titles still count the real tokens. It applies only when
    min_width < max_len.
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    w = padding_waste(query_lens)
    B, L, N = w.batch_size, w.max_len, w.packed_tokens
    min_width = check_int("min_width", min_width, min=0)
    widen = min_width if min_width < L else 0  # below max_len: a bar never passes the row
    drawn = [max(n, widen) for n in w.query_lens]  # each request's bar width, in tokens
    thin = [i for i, n in enumerate(w.query_lens) if n < widen]  # the requests drawn wider
    packed_rows = math.ceil(sum(drawn) / L)
    color = [f"C{i % 10}" for i in range(B)]
    fig, (ax_pad, ax_pack) = plt.subplots(
        2,
        1,
        sharex=True,
        figsize=(width, 1.9 + 0.22 * (B + packed_rows)),  # 0.22 in per row in both panels
        gridspec_kw={"height_ratios": [B, packed_rows]},
    )
    ax_pad.barh(
        range(B), [L] * B, height=1.0, color="#d0d0d0", edgecolor="white", linewidth=0.5
    )  # padding
    ax_pad.barh(range(B), drawn, height=1.0, color=color, edgecolor=color, linewidth=0.8)
    start = 0  # where each request's (drawn) tokens start in the flat [N] row
    for i, n in enumerate(drawn):
        while n > 0:  # a request may wrap onto the next line
            row, col = divmod(start, L)
            take = min(n, L - col)
            ax_pack.barh(
                row,
                take,
                left=col,
                height=1.0,
                color=color[i],
                edgecolor=color[i],
                linewidth=0.8,
            )
            start, n = start + take, n - take
    ax_pad.set_title(
        f"padded [B={B}, max_len={fmt_int(L)}]: {fmt_int(w.padded_tokens)} positions, "
        f"{fmt_int(w.wasted_tokens)} of them padding (grey)",
        fontsize=10,
        loc="left",
    )
    ax_pack.set_title(
        f"packed [N={fmt_int(N)}]: {fmt_int(N)} tokens, no padding (one row, wrapped at "
        "max_len)",
        fontsize=10,
        loc="left",
    )
    ax_pad.set_ylim(B - 0.5, -0.5)
    ax_pad.set_yticks(range(B), [str(i + 1) for i in range(B)], fontsize=8)
    ax_pad.set_ylabel("request")
    ax_pack.set_ylim(packed_rows - 0.5, -0.5)
    ax_pack.set_yticks([])
    ax_pack.set_xlim(0, L)
    ax_pack.xaxis.set_major_locator(MaxNLocator(nbins=8, integer=True))
    ax_pack.xaxis.set_major_formatter(lambda x, _: fmt_int(x))
    ax_pack.set_xlabel("token position in the row (tokens)")
    fig.suptitle(
        f"same tokens, {fmt_percent(w.wasted_fraction)} of the padded batch is padding",
        fontsize=11,
    )
    fig.tight_layout()
    if thin:
        lens = sorted({w.query_lens[i] for i in thin})
        thin_lens = f"{lens[0]} each" if len(lens) == 1 else ", ".join(map(str, lens))
        fig.text(
            0.5,
            -0.01,
            f"requests {', '.join(str(i + 1) for i in thin)}: under {widen} tokens "
            f"({thin_lens}), drawn {widen} tokens wide "
            "so that they show",
            ha="center",
            va="top",
            fontsize=9,
            style="italic",
        )
    return fig


def padding_waste_widget(query_lens=PRESETS["mixed: 2 prefills + 6 decodes"]):
    """ipywidgets UI: a preset menu, the number of requests, each request's new tokens; redraws
    on change.

    Returns a LiveControls box: before the cell has run in this session, JupyterLab shows its
    picture.
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    from minillm.notebook.widgets.live import LiveControls, figure_png

    lens = list(padding_waste(query_lens).query_lens)[:MAX_REQUESTS]
    preset = widgets.Dropdown(
        options=[*PRESETS, "custom"],
        description="preset",
        value=next((k for k, v in PRESETS.items() if v == lens), "custom"),
        layout=widgets.Layout(width="22em"),
    )
    count = widgets.IntSlider(
        value=len(lens),
        min=1,
        max=MAX_REQUESTS,
        description="requests",
        layout=widgets.Layout(width="24em"),
    )
    boxes = [
        widgets.BoundedIntText(
            value=lens[i] if i < len(lens) else 1,
            min=1,
            max=MAX_TOKENS,
            description=f"request {i + 1}",
            style={"description_width": "5.5em"},
            layout=widgets.Layout(width="11.5em"),
        )
        for i in range(MAX_REQUESTS)
    ]
    out = widgets.Output()
    busy = [False]  # a preset sets many controls at once: redraw only after the last

    def redraw(*_):
        if busy[0]:
            return
        for i, box in enumerate(boxes):
            box.layout.display = None if i < count.value else "none"
        current = [b.value for b in boxes[: count.value]]
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
    grid = widgets.GridBox(
        boxes, layout=widgets.Layout(grid_template_columns="repeat(auto-fill, 12em)")
    )  # wraps
    picture = padding_waste_figure(lens)
    png = figure_png(
        picture, footer="the figure for these lengths: run this cell for the live controls"
    )
    plt.close(picture)
    return LiveControls(
        [widgets.HBox([preset, count]), grid, out],
        picture=png,
        caption="padding-waste controls (run the cell to use them): "
        f"{padding_waste(lens).summary()}",
    )
