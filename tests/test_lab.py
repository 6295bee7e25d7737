"""The JupyterLab path: chapters opened, run and played with in a real JupyterLab, in headless
Chromium.

nbval runs every notebook, but never opens JupyterLab. Here JupyterLab runs on 127.0.0.1 (a free
port, a token) over a copy of notebooks/ in a temporary folder, with its own settings (no
autosave, no news), so nothing in the repository is written. Chromium (Debian's, driven by
Playwright, like the site test) opens a chapter as a reader would: untrusted, so the widget
cells show their pictures; then Run All, no error outputs, and the widgets must be live controls
that redraw when changed. A missing or disabled widget extension, or a widget that stops
updating, fails here. JupyterLab is stopped by its PID. Screenshots go to test-artifacts/lab/.
MINILLM_SKIP_BROWSER=1 skips these checks on purpose.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from minillm.notebook.widgets import padding_waste, slot_memory

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]  # as the site test
SHOTS = ROOT / "test-artifacts" / "lab"
RUN_ALL_TIMEOUT_MS = (
    240_000  # a chapter takes ~10 s alone; the shared CI box can be much slower
)
# JupyterLab user settings for the test: never write the copy back, never ask about news
SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}
WIDGET_HELP = (
    "is the jupyterlab_widgets extension installed and enabled (jupyter labextension list)?"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """(base URL, token) of a JupyterLab serving a copy of the chapters; stopped by its PID
    afterwards."""
    if os.environ.get("MINILLM_SKIP_BROWSER") == "1":
        pytest.skip(
            "MINILLM_SKIP_BROWSER=1: the JupyterLab browser checks are skipped on purpose"
        )
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} not found: install Debian's chromium, or set MINILLM_SKIP_BROWSER=1"
        )
    home = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "notebooks", home / "notebooks")
    for name, values in SETTINGS.items():
        (home / "settings" / name).parent.mkdir(parents=True, exist_ok=True)
        (home / "settings" / name).write_text(json.dumps(values))
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
    )
    port, token = free_port(), secrets.token_hex(16)
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={home}",
        "--LabApp.expose_app_in_browser=True",
    ]  # window.jupyterapp: read the notebook model, not pixels
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")  # CI containers run as root
    log = (home / "jupyterlab.log").open("w")
    server = subprocess.Popen(command, cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if server.poll() is not None:
                pytest.fail(
                    "JupyterLab exited with "
                    f"{server.returncode}:\n{(home / 'jupyterlab.log').read_text()[-3000:]}"
                )
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("JupyterLab did not answer within 60 s")
                time.sleep(0.3)
        yield base, token
    finally:
        os.kill(server.pid, signal.SIGTERM)  # the server shuts its kernels down on SIGTERM
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


@pytest.fixture(scope="module")
def browser(lab, tmp_path_factory):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1280, "height": 900},
        )
        yield context
        context.close()


def shot(locator, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    locator.scroll_into_view_if_needed()
    locator.screenshot(path=str(SHOTS / f"{name}.png"))


PANEL = "jupyterapp.shell.currentWidget"


def open_chapter(browser, lab, name: str):
    """A new tab with the chapter open in JupyterLab and its kernel idle; the tab is closed
    afterwards by the test."""
    base, token = lab
    page = browser.new_page()
    page.goto(f"{base}/lab/tree/notebooks/{name}.ipynb?reset&token={token}")
    page.wait_for_function(
        f"() => window.jupyterapp && {PANEL} && {PANEL}.context && {PANEL}.context.path"
        f" && {PANEL}.context.path.endsWith('{name}.ipynb') && {PANEL}.sessionContext.session"
        f" && {PANEL}.sessionContext.session.kernel"
        f" && {PANEL}.sessionContext.session.kernel.status === 'idle'",
        timeout=90_000,
    )
    # the kernel's spec and language info reach the notebook's metadata after it starts
    page.evaluate(
        "async () => "
        f"{{ const k = {PANEL}.sessionContext.session.kernel; await k.info; await k.spec;"
        " await new Promise(r => setTimeout(r, 1000)); }"
    )
    return page


def is_dirty(page) -> bool:
    return page.evaluate(f"() => {PANEL}.context.model.dirty")


def run_all(page) -> list:
    """Run > Run All Cells, as a reader does; wait until every code cell ran; return the error
    outputs."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    page.wait_for_function(
        f"() => {{ const m = {PANEL}.content.model; for (let i = 0; i < m.cells.length; i++) {{"
        " const c = m.cells.get(i); if (c.type === 'code' && c.executionCount === null) "
        "return false; }"
        f" return {PANEL}.sessionContext.session.kernel.status === 'idle'; }}",
        timeout=RUN_ALL_TIMEOUT_MS,
    )
    return page.evaluate(
        "() => "
        f"{{ const m = {PANEL}.content.model, errors = []; for (let i = 0; i < m.cells.length; i++) {{"
        " const c = m.cells.get(i); if (c.type !== 'code') continue;"
        " for (const o of c.outputs.toJSON()) if (o.output_type === 'error') errors.push([i, "
        "o.ename, o.evalue]); }"
        " return errors; }"
    )


def widget_cell(page, needle: str):
    cell = page.locator(".jp-CodeCell").filter(
        has=page.locator(".jp-InputArea", has_text=needle)
    )
    cell.first.wait_for(
        state="attached", timeout=60_000
    )  # JupyterLab renders a long notebook's cells in batches
    assert cell.count() == 1, f"expected one cell with {needle!r}, found {cell.count()}"
    cell.scroll_into_view_if_needed()
    return cell


def live_widget(cell, controls: str):
    """The widget's root, once its controls rendered; a clear failure if the cell shows anything
    else."""
    root = cell.locator(".jp-OutputArea-output .widget-vbox").first
    try:
        root.locator(controls).first.wait_for(state="visible", timeout=30_000)
    except Exception:
        shown = cell.locator(".jp-OutputArea-output").first.inner_html()[:300]
        pytest.fail(
            f"no live widget controls ({controls}) rendered; the output shows: {shown!r}; "
            f"{WIDGET_HELP}"
        )
    return root


def printed(root) -> str:
    """The last line the widget printed into its Output area (under its figure).

    textContent, not innerText: JupyterLab skips the layout of cells scrolled out of view
    (content-visibility), and innerText of an element never laid out is empty.
    """
    text = root.locator(".widget-output .jp-RenderedText")
    return text.last.text_content(timeout=2_000).strip() if text.count() else ""


def figure_src(root) -> str:
    return root.locator(".widget-output img").first.get_attribute("src", timeout=5_000)


def wait_for_line(root, expected: str, timeout: float = 30.0) -> None:
    deadline, line = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            line = printed(root)
        except Exception:  # the output area is being redrawn
            line = None
        if line == expected:
            return
        time.sleep(0.2)
    shown = re.sub(
        r'src="data:[^"]*"', 'src="data:..."', root.locator(".widget-output").first.inner_html()
    )
    pytest.fail(
        f"the widget's line is {line!r}, expected {expected!r}: the widget stopped updating. "
        f"Its output area holds: {shown[:1500]}"
    )


def cut_labels(root) -> list[str]:
    """The visible labels whose text does not fit (drawn as "request …").

    scrollWidth alone misses them: chapter 5's old "request 10" was 70.09 px of text in a 70 px
    label, drawn with an ellipsis while scrollWidth == clientWidth == 70. So the laid-out width
    of the text (a Range over it, in layout units of 1/64 px) is compared with the room inside
    the label's padding.
    """
    return root.locator(".widget-label:visible").evaluate_all(
        "labels => labels.filter(l => { const s = getComputedStyle(l), r = "
        "document.createRange();"
        " r.selectNodeContents(l);"
        " const room = l.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);"
        " return l.scrollWidth > l.clientWidth || r.getBoundingClientRect().width > room + "
        "0.01; })"
        ".map(l => l.textContent)"
    )


def test_chapter_5_opens_clean_runs_and_its_widget_redraws(browser, lab):
    page = open_chapter(browser, lab, "05_varlen_batching")
    assert not is_dirty(page), (
        "opening the chapter modified it: its kernel metadata differs from what JupyterLab "
        "writes"
    )
    cell = widget_cell(page, "padding_waste_widget(query_lens)")
    before = cell.locator(".jp-OutputArea-output")
    assert before.locator("img").count() == 1, "the untrusted widget cell shows no picture"
    assert "VBox(" not in before.inner_text()
    shot(cell, "05-widget-cell-untrusted")
    assert not is_dirty(page), "the chapter turned modified while it sat open"

    assert run_all(page) == [], "error outputs after Run All"
    cell.scroll_into_view_if_needed()  # Run All leaves the view at the last cell
    root = live_widget(cell, "select")
    chapter = [2000, 512, 1, 1, 1, 1, 1, 1]
    wait_for_line(
        root, padding_waste(chapter).summary()
    )  # "... 84% of the padded work is padding"
    src = figure_src(root)
    root.locator(".widget-dropdown select").select_option(label="all decode")
    wait_for_line(
        root, padding_waste([1] * 8).summary()
    )  # "... 0% of the padded work is padding"
    assert figure_src(root) != src, "the figure was not redrawn"
    request_1 = root.locator(".widget-text input").first
    request_1.fill("9")
    request_1.press("Enter")
    wait_for_line(root, padding_waste([9] + [1] * 7).summary())
    assert root.locator(".widget-dropdown select").input_value() == "custom"

    handle = root.locator(".widget-slider .noUi-handle").first  # requests: 8 -> 16
    handle.focus()
    for _ in range(8):
        handle.press("ArrowRight")
    wait_for_line(root, padding_waste([9] + [1] * 15).summary())
    assert root.locator(".widget-text:visible").count() == 16
    assert cut_labels(root) == [], "labels cut short"
    shot(root, "05-widget-16-requests")
    page.close()


def test_chapter_3_slots_slider_redraws_the_memory_bar(browser, lab):
    page = open_chapter(browser, lab, "03_kv_slots")
    assert not is_dirty(page), (
        "opening the chapter modified it: its kernel metadata differs from what JupyterLab "
        "writes"
    )
    cell = widget_cell(page, "slot_memory_widget(")
    assert cell.locator(".jp-OutputArea-output img").count() == 1, (
        "the untrusted widget cell shows no picture"
    )
    shot(cell, "03-widget-cell-untrusted")
    assert not is_dirty(page), "the chapter turned modified while it sat open"

    assert run_all(page) == [], "error outputs after Run All"
    cell.scroll_into_view_if_needed()  # Run All leaves the view at the last cell
    root = live_widget(cell, ".widget-slider .noUi-handle")
    wait_for_line(root, slot_memory("27B-class, TP2", 4, 65_536).summary())
    readouts = root.locator(".widget-readout").all_inner_texts()
    assert "65,536" in readouts, f"the context slider reads {readouts}, the figure says 65,536"
    src = figure_src(root)
    handle = root.locator(".widget-slider .noUi-handle").first  # slots: 4 -> 5
    handle.focus()
    handle.press("ArrowRight")
    wait_for_line(
        root, slot_memory("27B-class, TP2", 5, 65_536).summary()
    )  # the figure's title, and its verdict
    assert figure_src(root) != src, "the figure was not redrawn"
    assert cut_labels(root) == [], "labels cut short"
    shot(root, "03-widget-5-slots")
    page.close()
