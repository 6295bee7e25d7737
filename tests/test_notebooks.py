"""The committed chapters as JupyterLab opens them: kernel metadata, widget cells, the site's
live controls.

JupyterLab rewrites a notebook's kernelspec and language_info from the kernel it starts; if the
committed values differ, an untouched chapter opens "modified" and asks to be saved on close.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from minillm.notebook.widgets import PRESETS

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(ROOT.glob("notebooks/[0-9][0-9]_*.ipynb"))
KERNELSPEC = {
    "display_name": "Python 3 (ipykernel)",
    "language": "python",
    "name": "python3",
}  # ipykernel's own
LANGUAGE_INFO_KEYS = {
    "codemirror_mode",
    "file_extension",
    "mimetype",
    "name",
    "nbconvert_exporter",
    "pygments_lexer",
    "version",
}
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
RUN_THIS_CELL = "# Run this cell for the live controls"


def load(notebook: Path) -> dict:
    return json.loads(notebook.read_text(encoding="utf-8"))


@pytest.mark.parametrize("notebook", CHAPTERS, ids=[nb.stem for nb in CHAPTERS])
def test_chapter_carries_the_kernel_metadata_jupyterlab_writes(notebook):
    nb = load(notebook)
    assert (nb["nbformat"], nb["nbformat_minor"]) == (4, 5)
    assert nb["metadata"]["kernelspec"] == KERNELSPEC
    info = nb["metadata"]["language_info"]
    assert set(info) == LANGUAGE_INFO_KEYS
    assert info["codemirror_mode"] == {"name": "ipython", "version": 3}
    assert (
        info["name"],
        info["pygments_lexer"],
        info["file_extension"],
        info["mimetype"],
        info["nbconvert_exporter"],
    ) == ("python", "ipython3", ".py", "text/x-python", "python")
    assert re.fullmatch(r"3\.\d+\.\d+", info["version"])


def test_every_chapter_was_executed_on_the_same_python():
    versions = {nb.name: load(nb)["metadata"]["language_info"]["version"] for nb in CHAPTERS}
    assert len(set(versions.values())) == 1, versions


def widget_cells(nb: dict) -> list[dict]:
    return [
        c
        for c in nb["cells"]
        if c["cell_type"] == "code"
        and any(WIDGET_VIEW in out.get("data", {}) for out in c.get("outputs", []))
    ]


@pytest.mark.parametrize("notebook", CHAPTERS, ids=[nb.stem for nb in CHAPTERS])
def test_widget_cells_say_run_me_show_a_picture_and_stay_off_the_site(notebook):
    for cell in widget_cells(load(notebook)):
        source = "".join(cell["source"])
        assert source.startswith(RUN_THIS_CELL), (
            f"a widget cell must start with {RUN_THIS_CELL!r}:\n{source}"
        )
        assert "jupyterlab-only" in cell["metadata"].get("tags", []), (
            "the site cannot run it: tag it jupyterlab-only"
        )
        (out,) = [o for o in cell["outputs"] if WIDGET_VIEW in o.get("data", {})]
        assert "image/png" in out["data"], (
            "an untrusted notebook shows the picture, not a raw widget repr"
        )
        assert not "".join(out["data"]["text/plain"]).startswith(("VBox(", "interactive("))


class _Controls(HTMLParser):
    def __init__(self):
        super().__init__()
        self.divs = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "div" and attrs.get("class", "").startswith("minillm-"):
            self.divs.append(attrs)


def live_controls(notebook: Path) -> list[dict]:
    parser = _Controls()
    for cell in load(notebook)["cells"]:
        if cell["cell_type"] == "markdown":
            parser.feed("".join(cell["source"]))
    return parser.divs


def test_each_ipywidget_has_a_live_control_for_the_site():
    by_chapter = {nb.stem: live_controls(nb) for nb in CHAPTERS}
    assert by_chapter["05_varlen_batching"] == [
        {
            "class": "minillm-padding-waste",
            "data-query-lens": ",".join(map(str, PRESETS["mixed: 2 prefills + 6 decodes"])),
        }
    ]
    assert by_chapter["03_kv_slots"] == [
        {
            "class": "minillm-slot-memory",
            "data-model": "27B-class, TP2",
            "data-slots": "4",
            "data-context": "65536",
        }
    ]
    for (
        notebook
    ) in CHAPTERS:  # a chapter with an ipywidget has a control that the site brings to life
        assert len(widget_cells(load(notebook))) == len(by_chapter[notebook.stem]), (
            notebook.name
        )
