"""slot_memory.py — what fixed KV slots reserve for a real model: numbers, a figure and a
notebook widget.

Chapter 3's memory wall: every slot reserves max_ctx tokens of K and V in every full-attention
layer, before a single token is stored. `slot_memory` computes that for a model, a slot count
and a context length against the chapter's 22 GiB per-GPU budget; the figure and the ipywidgets
UI draw it. The book site draws the same thing with docs/assets/slot-memory.js, from the same
model list and the same line.
"""

from __future__ import annotations

from dataclasses import dataclass

from minillm.checkpoints import TINY_CONFIG
from minillm.notebook.widgets.live import GiB, fmt_bytes, fmt_int
from minillm.slots import reserved_kv_bytes

TINY_MODEL = "this book's tiny Qwen3"
MODELS = {  # name: (layers that keep a full-length cache, KV heads on one GPU, head_dim)
    "27B-class, TP2": (
        16,
        16,
        128,
    ),  # the chapter's model: 16 full-attention layers, 16 KV heads per GPU
    "Qwen3-0.6B": (28, 8, 128),
    "Qwen3-8B": (36, 8, 128),
    "Llama-3.1-8B": (32, 8, 128),
    TINY_MODEL: (
        TINY_CONFIG["num_hidden_layers"],
        TINY_CONFIG["num_key_value_heads"],
        TINY_CONFIG["head_dim"],
    ),
}  # the same list as the book site's docs/assets/slot-memory.js
BUDGET_BYTES = 22 * GiB  # KV budget per GPU in the chapter
BYTES_PER_ELEMENT = 2  # an fp16 cache
CONTEXTS = tuple(2**k for k in range(12, 18))  # 4,096 ... 131,072 tokens per slot
MAX_SLOTS = 16


@dataclass(frozen=True)
class SlotMemory:
    model: str
    slots: int
    context: int  # max_ctx: tokens every slot reserves
    slot_bytes: int  # what one slot reserves, all layers
    budget_bytes: int = BUDGET_BYTES

    @property
    def reserved_bytes(self) -> int:
        return self.slots * self.slot_bytes

    @property
    def fits(self) -> bool:
        return self.reserved_bytes <= self.budget_bytes

    @property
    def slots_that_fit(self) -> int:
        return self.budget_bytes // self.slot_bytes

    def title(self) -> str:
        return (
            f"{self.model}: {_count(self.slots, 'slot')} × {fmt_int(self.context)} tokens = "
            f"{fmt_bytes(self.reserved_bytes)}"
        )

    def summary(self) -> str:
        """One line; the site's control prints the same line for the same choice."""
        where = "within" if self.fits else "over"
        return (
            f"{self.title()}, {where} the {self.budget_bytes // GiB} GiB budget, "
            f"which holds {_count(self.slots_that_fit, 'such slot')}"
        )


def _count(n: int, noun: str) -> str:
    return f"{fmt_int(n)} {noun}{'' if n == 1 else 's'}"


def slot_memory(model: str, slots: int, context: int, models: dict | None = None) -> SlotMemory:
    """What `slots` slots of `context` tokens reserve in fp16 for `model` (a name in
    `models`)."""
    models = MODELS if models is None else models
    if model not in models:
        raise ValueError(
            f"model {model!r} is not in the list: expected one of {sorted(models)}"
        )
    for name, value in (("slots", slots), ("context", context)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} is {value!r}: expected an int >= 1")
    layers, kv_heads, head_dim = models[model]
    return SlotMemory(
        model,
        slots,
        context,
        reserved_kv_bytes(1, context, layers, kv_heads, head_dim, BYTES_PER_ELEMENT),
    )


def slot_memory_figure(m: SlotMemory, width: float = 8.0):
    """One bar: the reserved KV per GPU, against the dashed budget line."""
    import matplotlib.pyplot as plt

    reserved, budget = m.reserved_bytes / GiB, m.budget_bytes / GiB
    fig, ax = plt.subplots(figsize=(width, 1.9))
    ax.barh([0], [reserved], color="C2" if m.fits else "C3", height=0.6)
    ax.axvline(budget, color="k", linestyle="--")
    ax.text(budget, 0.42, f" budget {m.budget_bytes // GiB} GiB", va="bottom", fontsize=9)
    ax.set_xlim(0, max(1.4 * budget, 1.1 * reserved))
    ax.set_ylim(-0.5, 0.7)
    ax.set_yticks([])
    ax.set_xlabel("reserved KV per GPU, fp16 (GiB)")
    ax.set_title(m.title(), fontsize=11, loc="left")
    fig.tight_layout()
    return fig


def slot_memory_widget(
    model: str = "27B-class, TP2",
    slots: int = 4,
    context: int = 65_536,
    extra_models: dict | None = None,
):
    """ipywidgets UI: a model menu, a slots slider and a context slider; redraws the bar and its
    line.

    `extra_models` adds entries such as the checkpoint the notebook loaded ({name: (layers,
    kv_heads, head_dim)}); the book's tiny checkpoint is listed already, so an entry with its
    numbers is left out. Returns a LiveControls box: before the cell has run in this session,
    JupyterLab shows its picture.
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    from minillm.notebook.widgets.live import LiveControls, figure_png

    tiny = MODELS[TINY_MODEL]
    extra = {
        name: tuple(spec) for name, spec in (extra_models or {}).items() if tuple(spec) != tiny
    }
    models = {
        **MODELS,
        **extra,
    }  # the tiny checkpoint is listed already; a real one joins the list
    start = slot_memory(model, slots, context, models)
    model_menu = widgets.Dropdown(
        options=list(models),
        value=model,
        description="model",
        layout=widgets.Layout(width="26em"),
    )
    slots_slider = widgets.IntSlider(
        value=slots,
        min=1,
        max=MAX_SLOTS,
        description="slots",
        layout=widgets.Layout(width="26em"),
    )
    context_slider = widgets.SelectionSlider(
        options=[(fmt_int(c), c) for c in CONTEXTS],
        value=context,
        description="context",
        layout=widgets.Layout(width="26em"),
    )
    out = widgets.Output()

    def redraw(*_):
        m = slot_memory(model_menu.value, slots_slider.value, context_slider.value, models)
        with out:
            out.clear_output(wait=True)
            fig = slot_memory_figure(m)
            display(fig)
            plt.close(fig)
            print(m.summary())

    for control in (model_menu, slots_slider, context_slider):
        control.observe(redraw, names="value")
    redraw()
    picture = slot_memory_figure(start)
    png = figure_png(
        picture, footer="the bar for these settings: run this cell for the live controls"
    )
    plt.close(picture)
    return LiveControls(
        [model_menu, slots_slider, context_slider, out],
        picture=png,
        caption=f"slot-memory controls (run the cell to use them): {start.summary()}",
    )
