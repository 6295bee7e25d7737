"""live.py — what the book's widgets share: number formats and a VBox that carries a picture of
itself.

The same numbers appear in three places: the notebook's ipywidgets, their matplotlib figures,
and the book site's live controls (docs/assets/*.js). The formats below are written so that the
site's script can reproduce them exactly: rounding is half-up on the float value (`floor(x +
0.5)`), which JavaScript's `Math.floor` gives bit for bit, not Python's round-half-even.
"""

from __future__ import annotations

import base64
import io
import math

import ipywidgets as widgets

MiB, GiB = 2**20, 2**30


def fmt_int(n: int) -> str:
    """65536 -> '65,536', in controls and figures alike."""
    return f"{int(n):,}"


def fmt_percent(fraction: float) -> str:
    """0.8426 -> '84%' (half-up, like the site's Math.floor(100 * x + 0.5))."""
    return f"{math.floor(fraction * 100 + 0.5)}%"


def fmt_bytes(n: int) -> str:
    """GiB with one decimal from 1 GiB up, whole MiB below: 34359738368 -> '32.0 GiB', 2**27 ->
    '128 MiB'."""
    if n >= GiB:
        return f"{math.floor(n / GiB * 10 + 0.5) / 10:.1f} GiB"
    return f"{fmt_int(math.floor(n / MiB + 0.5))} MiB"


def figure_png(fig, footer: str | None = None) -> bytes:
    """The figure as PNG bytes, optionally with a grey line of text under it."""
    if footer:  # under everything: the tight bounding box grows to take it in
        fig.text(
            0.5, -0.01, footer, ha="center", va="top", fontsize=9, color="0.35", style="italic"
        )
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")  # as the inline backend draws it
    return buf.getvalue()


class LiveControls(widgets.VBox):
    """A VBox whose output also holds a picture of its starting state.

    JupyterLab draws a widget only from trusted output with the widget extension loaded. A
    notebook that was just opened is untrusted, so it would show the widget's text repr
    ("VBox(children=...)"), which looks broken. With a PNG in the same output, JupyterLab shows
    the picture there, and the live controls as soon as the cell runs (the widget view ranks
    above the picture).
    """

    def __init__(self, children, picture: bytes, caption: str, **kwargs):
        super().__init__(children, **kwargs)
        self._picture, self._caption = picture, caption

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        bundle["image/png"] = base64.b64encode(self._picture).decode("ascii")
        bundle["text/plain"] = self._caption
        return bundle
