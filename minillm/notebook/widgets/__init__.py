"""minillm.notebook.widgets — the book's interactive pictures, for JupyterLab.

- padding_waste: chapter 5, a padded [B, max_len] batch against the packed [N] row;
- slot_memory: chapter 3, what fixed KV slots reserve for a real model against a 22 GiB budget.

Each module has the numbers (plain Python, tested without a kernel), a matplotlib figure and an
ipywidgets UI. The book site cannot run a kernel, so it draws the same ideas with its own
scripts (docs/assets/padding-waste.js, slot-memory.js) from the same presets, model list and
summary lines; the notebook cells that make the ipywidgets are tagged `jupyterlab-only` and left
out of the site.
"""

from minillm.notebook.widgets.padding_waste import (
    MAX_REQUESTS,
    MAX_TOKENS,
    PRESETS,
    PaddingWaste,
    padding_waste,
    padding_waste_figure,
    padding_waste_widget,
)
from minillm.notebook.widgets.slot_memory import (
    BUDGET_BYTES,
    CONTEXTS,
    MAX_SLOTS,
    MODELS,
    SlotMemory,
    slot_memory,
    slot_memory_figure,
    slot_memory_widget,
)

__all__ = [
    "MAX_REQUESTS",
    "MAX_TOKENS",
    "PRESETS",
    "PaddingWaste",
    "padding_waste",
    "padding_waste_figure",
    "padding_waste_widget",
    "BUDGET_BYTES",
    "CONTEXTS",
    "MAX_SLOTS",
    "MODELS",
    "SlotMemory",
    "slot_memory",
    "slot_memory_figure",
    "slot_memory_widget",
]
