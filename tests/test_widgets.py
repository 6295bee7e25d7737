"""minillm.notebook.widgets: the padding-waste and slot-memory numbers, figures and ipywidgets
UIs."""

import base64
import itertools

import matplotlib
import pytest

from minillm.notebook.widgets import (
    MODELS,
    PRESETS,
    padding_waste,
    padding_waste_figure,
    padding_waste_widget,
    slot_memory,
    slot_memory_figure,
    slot_memory_widget,
)
from minillm.notebook.widgets.live import fmt_bytes, fmt_int, fmt_percent

matplotlib.use("Agg")
CHAPTER = [2000, 512, 1, 1, 1, 1, 1, 1]
GiB = 2**30


# ------------------------------------------------------------------ formats shared with the
#   site's scripts


def test_formats_round_half_up_like_the_site_script():
    assert fmt_int(65536) == "65,536"
    assert [fmt_percent(x) for x in (0.8426, 0.125, 0.0, 1.0)] == [
        "84%",
        "13%",
        "0%",
        "100%",
    ]  # 12.5 -> 13, not 12
    assert (
        fmt_bytes(32 * GiB) == "32.0 GiB" and fmt_bytes(21 * GiB // 4) == "5.3 GiB"
    )  # 5.25 -> 5.3, not 5.2
    assert fmt_bytes(2**27) == "128 MiB" and fmt_bytes(GiB - 1) == "1,024 MiB"


# ------------------------------------------------------------------ padding waste


def test_chapter_preset_wastes_84_percent():
    w = padding_waste(CHAPTER)
    assert (w.batch_size, w.max_len, w.padded_tokens, w.packed_tokens) == (
        8,
        2000,
        16_000,
        2_518,
    )
    assert f"{w.wasted_fraction:.0%}" == "84%"
    assert (
        w.summary()
        == "padded [B=8, max_len=2,000] = 16,000 positions; packed [N=2,518]: 84% of the "
        "padded work is padding"
    )


def test_presets():
    assert PRESETS["mixed: 2 prefills + 6 decodes"] == CHAPTER
    decode = padding_waste(PRESETS["all decode"])
    assert (decode.padded_tokens, decode.packed_tokens, decode.wasted_fraction) == (8, 8, 0.0)
    prefill = padding_waste(PRESETS["all prefill"])
    assert (prefill.padded_tokens, prefill.packed_tokens) == (8 * 768, 3904)
    assert f"{prefill.wasted_fraction:.0%}" == "36%"


@pytest.mark.parametrize(
    "lens, message",
    [([], "empty"), ([3, 0], "holds 0"), ([2.5], "holds 2.5"), ([True], "True")],
)
def test_bad_query_lens_raise(lens, message):
    with pytest.raises(ValueError, match=message):
        padding_waste(lens)


def test_figure_draws_both_layouts_to_one_scale():
    fig = padding_waste_figure(CHAPTER)
    pad, pack = fig.axes
    assert "padded [B=8, max_len=2,000]" in pad.get_title(
        "left"
    ) and "packed [N=2,518]" in pack.get_title("left")
    assert (
        pad.get_xlim() == pack.get_xlim() == (0, 2000)
    )  # the packed row wraps at max_len: one x scale
    assert pack.get_ylim() == (1.5, -0.5)  # 2,518 tokens wrap onto two rows of 2,000
    assert "(tokens)" in pack.get_xlabel()
    assert "84%" in fig._suptitle.get_text()


def _layouts():
    """Every preset, and 1 to 16 requests of very different and of equal lengths."""
    yield from PRESETS.values()
    for n in range(1, 17):
        yield [2000, 512] + [1] * (n - 2) if n > 2 else [7] * n
        yield [100 * (i + 1) for i in range(n)]
    yield [32768] + [1] * 15


@pytest.mark.parametrize("lens", list(_layouts()), ids=lambda lens: f"{len(lens)}x{max(lens)}")
def test_figure_layout_holds_for_every_preset_and_1_to_16_requests(lens):
    fig = padding_waste_figure(lens)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    pad, pack = fig.axes
    box = fig.bbox
    pad_box, pack_box = pad.get_window_extent(), pack.get_window_extent()
    assert (
        pad_box.width == pytest.approx(pack_box.width) and pad_box.width > 0.75 * box.width
    )  # no cramped panel
    row_pad, row_pack = pad_box.height / len(lens), pack_box.height / -(-sum(lens) // max(lens))
    assert row_pad == pytest.approx(
        row_pack, rel=0.02
    )  # same row height: equal areas mean equal work
    texts = [
        fig._suptitle,
        pad._left_title,
        pack._left_title,
        pad.yaxis.label,
        pack.xaxis.label,
    ]
    extents = [t.get_window_extent(renderer) for t in texts]
    for text, extent in zip(texts, extents):
        assert box.contains(extent.x0, extent.y0) and box.contains(extent.x1, extent.y1), (
            f"cut: {text.get_text()!r}"
        )
    for (a, ea), (b, eb) in itertools.combinations(zip(texts, extents), 2):
        assert not ea.overlaps(eb), f"{a.get_text()!r} runs into {b.get_text()!r}"
    ticks = [t.get_text() for t in pack.get_xticklabels() if t.get_visible() and t.get_text()]
    assert ticks and all(t.replace(",", "").isdigit() for t in ticks), (
        ticks
    )  # whole tokens: no 0.5
    assert [t.get_text() for t in pad.get_yticklabels()] == [
        str(i + 1) for i in range(len(lens))
    ]
    matplotlib.pyplot.close(fig)


def test_widget_presets_drive_the_controls():
    ui = padding_waste_widget(CHAPTER)
    (preset, count), boxes = ui.children[0].children, ui.children[1].children
    assert preset.value == "mixed: 2 prefills + 6 decodes" and count.value == 8
    assert [b.value for b in boxes[:8]] == CHAPTER
    assert [b.description for b in boxes[9:11]] == [
        "request 10",
        "request 11",
    ]  # numbered from 1, like the site
    preset.value = "all prefill"
    assert [b.value for b in boxes[: count.value]] == PRESETS["all prefill"]
    boxes[0].value = 7  # a hand edit leaves the preset
    assert preset.value == "custom"
    count.value = 3
    assert [b.layout.display for b in boxes[:4]] == [None, None, None, "none"]


def test_widget_output_carries_a_picture_for_untrusted_notebooks():
    bundle = padding_waste_widget(CHAPTER)._repr_mimebundle_()
    assert set(bundle) == {
        "application/vnd.jupyter.widget-view+json",
        "image/png",
        "text/plain",
    }
    assert base64.b64decode(bundle["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"
    assert (
        "84% of the padded work is padding" in bundle["text/plain"]
        and "VBox" not in bundle["text/plain"]
    )


# ------------------------------------------------------------------ slot memory


def test_slot_memory_is_the_chapter_arithmetic():
    m = slot_memory("27B-class, TP2", 4, 65_536)
    assert (
        m.slot_bytes == 16 * 512 * 2**20 and m.reserved_bytes == 32 * GiB
    )  # 512 MiB per layer and slot
    assert (m.fits, m.slots_that_fit) == (False, 2)
    assert m.title() == "27B-class, TP2: 4 slots × 65,536 tokens = 32.0 GiB"
    assert m.summary() == m.title() + ", over the 22 GiB budget, which holds 2 such slots"
    one = slot_memory("Qwen3-8B", 1, 131_072)
    assert (
        one.summary()
        == "Qwen3-8B: 1 slot × 131,072 tokens = 18.0 GiB, within the 22 GiB budget, which "
        "holds 1 such slot"
    )
    assert slot_memory("this book's tiny Qwen3", 4, 65_536).title().endswith("= 128 MiB")


@pytest.mark.parametrize(
    "args, message",
    [
        (("GPT-5", 1, 4096), "'GPT-5' is not in the list"),
        (("Qwen3-8B", 0, 4096), "slots is 0"),
        (("Qwen3-8B", 2, 4096.0), "context is 4096.0"),
    ],
)
def test_slot_memory_rejects_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        slot_memory(*args)


def test_slot_memory_figure_title_and_budget_line():
    fig = slot_memory_figure(slot_memory("Qwen3-8B", 16, 131_072))
    (ax,) = fig.axes
    assert ax.get_title("left") == "Qwen3-8B: 16 slots × 131,072 tokens = 288.0 GiB"
    assert ax.get_xlim()[1] > 288 and ax.lines[0].get_xdata()[0] == 22
    matplotlib.pyplot.close(fig)


def test_slot_memory_widget_redraws_and_formats_context_like_the_figure(capsys):
    ui = slot_memory_widget(
        extra_models={
            "the loaded model (qwen3-tiny-v1)": (2, 2, 32),
            "the loaded model (Qwen3-4B)": (36, 8, 128),
        }
    )  # same numbers as Qwen3-8B: listed
    model, slots, context, out = ui.children
    assert list(model.options) == [
        *MODELS,
        "the loaded model (Qwen3-4B)",
    ]  # the tiny one is listed already
    assert context.options[4] == ("65,536", 65_536) and context.value == 65_536
    assert context.label == "65,536"  # what the slider shows, as the figure's title writes it
    assert (
        "4 slots × 65,536 tokens = 32.0 GiB" in capsys.readouterr().out
    )  # outside a kernel, the line is printed
    slots.value = 1
    assert "1 slot × 65,536 tokens = 8.0 GiB, within" in capsys.readouterr().out
    assert set(ui._repr_mimebundle_()) == {
        "application/vnd.jupyter.widget-view+json",
        "image/png",
        "text/plain",
    }


def test_min_width_draws_thin_requests_wider_and_says_so():
    plain, wide = padding_waste_figure(CHAPTER), padding_waste_figure(CHAPTER, min_width=20)
    # the padded panel's coloured bars: one per request, after the grey padding bars
    widths = [p.get_width() for p in wide.axes[0].patches[len(CHAPTER) :]]
    assert widths == [2000, 512] + [20] * 6
    assert [p.get_width() for p in plain.axes[0].patches[len(CHAPTER) :]] == CHAPTER
    notes = " ".join(t.get_text() for t in wide.texts)
    assert "requests 3, 4, 5, 6, 7, 8" in notes and "20 tokens wide" in notes

    def noted(fig):
        return any("drawn" in t.get_text() for t in fig.texts)

    assert not noted(plain)  # off by default: drawn to scale, nothing to explain
    # titles count the real tokens, not the drawn ones
    assert "packed [N=2,518]" in wide.axes[1].get_title("left")
    # a min_width of max_len or more cannot apply: no bar may pass the row
    assert not noted(padding_waste_figure(CHAPTER, min_width=2000))
    with pytest.raises(ValueError, match="min_width"):
        padding_waste_figure(CHAPTER, min_width=-1)
