"""widgets.py: padding-waste numbers, figure, ipywidgets UI and the static-site snippet."""

import re
from html.parser import HTMLParser

import matplotlib
import pytest

from minillm.widgets import PRESETS, padding_waste, padding_waste_figure, padding_waste_html, padding_waste_widget

matplotlib.use("Agg")
CHAPTER = [2000, 512, 1, 1, 1, 1, 1, 1]


def test_chapter_preset_wastes_84_percent():
    w = padding_waste(CHAPTER)
    assert (w.batch_size, w.max_len, w.padded_tokens, w.packed_tokens) == (8, 2000, 16_000, 2_518)
    assert f"{w.wasted_fraction:.0%}" == "84%"
    assert "84% of the padded work is padding" in w.summary()


def test_presets():
    assert PRESETS["mixed: 2 prefills + 6 decodes"] == CHAPTER
    decode = padding_waste(PRESETS["all decode"])
    assert (decode.padded_tokens, decode.packed_tokens, decode.wasted_fraction) == (8, 8, 0.0)
    prefill = padding_waste(PRESETS["all prefill"])
    assert (prefill.padded_tokens, prefill.packed_tokens) == (8 * 768, 3904)
    assert f"{prefill.wasted_fraction:.0%}" == "36%"


@pytest.mark.parametrize("lens, message", [([], "empty"), ([3, 0], "holds 0"), ([2.5], "holds 2.5"), ([True], "True")])
def test_bad_query_lens_raise(lens, message):
    with pytest.raises(ValueError, match=message):
        padding_waste(lens)


def test_figure_draws_both_layouts_to_scale():
    fig = padding_waste_figure(CHAPTER)
    pad, pack = fig.axes
    assert "padded [B=8, max_len=2,000]" in pad.get_title() and "packed [N=2,518]" in pack.get_title()
    assert pad.get_xlim() == (0, 2000) and pack.get_xlim() == (0, 2518)
    assert all("(tokens)" in ax.get_xlabel() for ax in (pad, pack))
    assert "84%" in fig._suptitle.get_text()


class _Divs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.divs, self.rows = [], 0

    def handle_starttag(self, tag, attrs):
        if tag == "div":
            self.divs.append(dict(attrs))
        if tag == "tr":
            self.rows += 1


def test_html_snippet_keeps_the_site_contract():
    snippet = padding_waste_html(CHAPTER)
    parsed = _Divs()
    parsed.feed(snippet)
    assert parsed.divs == [{"class": "minillm-padding-waste", "data-query-lens": "2000,512,1,1,1,1,1,1"}]
    assert parsed.rows == 1 + 8  # header + one row per request: the fallback without JavaScript
    assert re.search(r"84% of the padded work is padding", snippet)


def test_widget_presets_drive_the_controls():
    ui = padding_waste_widget(CHAPTER)
    (preset, count), boxes = ui.children[0].children, ui.children[1].children
    assert preset.value == "mixed: 2 prefills + 6 decodes" and count.value == 8
    assert [b.value for b in boxes[:8]] == CHAPTER
    preset.value = "all prefill"
    assert [b.value for b in boxes[:count.value]] == PRESETS["all prefill"]
    boxes[0].value = 7  # a hand edit leaves the preset
    assert preset.value == "custom"
    count.value = 3
    assert [b.layout.display for b in boxes[:4]] == [None, None, None, "none"]
