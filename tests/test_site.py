"""The book site: a strict mkdocs build, then every page in headless Chromium, with nothing
fetched
from outside 127.0.0.1 and nothing missing.

The browser is Debian's Chromium (/usr/bin/chromium, or $MINILLM_CHROMIUM), or where apt is not
available Playwright's own build; `make test` installs one when neither is there. It is driven
by Playwright's Python package. A missing Chromium fails these tests; set MINILLM_SKIP_BROWSER=1
to skip the browser part on purpose. Screenshots of every page at 1280 and 390 px go to
test-artifacts/screenshots/ (git-ignored), and the requests each page made to
test-artifacts/site-requests.json. MINILLM_BUILT_SITE=/path/to/site checks a site built earlier
instead of building one (for example an older build, to see what these checks find there).
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("MINILLM_CHROMIUM") or "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts"
SCREENSHOTS = ARTIFACTS / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
CHAPTERS = sorted(ROOT.glob("notebooks/[0-9][0-9]_*.ipynb"))
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# cell tag: ipywidgets need a kernel, so mkdocs.yml leaves these cells off the site
LAB_ONLY = "jupyterlab-only"


def load_hook(name: str):
    spec = importlib.util.spec_from_file_location(
        f"book_hook_{name}", ROOT / "docs" / "hooks" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wasted_percent(lens: list[int]) -> str:
    return f"{round(100 * (1 - sum(lens) / (len(lens) * max(lens))))}%"


# ------------------------------------------------------------------ the build


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if os.environ.get("MINILLM_BUILT_SITE"):
        return Path(os.environ["MINILLM_BUILT_SITE"])
    site_dir = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = build.stdout + build.stderr
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{log[-4000:]}"
    warnings = [line for line in log.splitlines() if line.startswith("WARNING")]
    assert warnings == [], "\n".join(warnings)
    return site_dir


def test_strict_build_writes_every_chapter_page(site):
    for notebook in CHAPTERS:
        assert (site / "notebooks" / notebook.stem / "index.html").is_file(), notebook.name
    for page in (
        "index.html",
        "how-to-use/index.html",
        "exercises/index.html",
        "glossary/index.html",
        "sources/index.html",
    ):
        assert (site / page).is_file(), page


def test_no_built_page_loads_anything_from_another_host(site):
    offline = load_hook("offline")
    outside = {
        str(page.relative_to(site)): offline.external_loads(page.read_text(encoding="utf-8"))
        for page in site.rglob("*.html")
    }
    assert {page: urls for page, urls in outside.items() if urls} == {}


def test_offline_hook_swaps_cdn_loaders_for_vendored_scripts():
    offline = load_hook("offline")
    page = (
        '<!-- Load mathjax --><script src="https://cdn.example/mathjax.js"> </script>'
        "<!-- End of mathjax configuration -->\n<script>\n(function() {\n  function "
        "addWidgetsRenderer() {\n"
        "    var s = 'https://unpkg.com/@jupyter-widgets/html-manager@*/dist/embed-amd.js';\n "
        " }\n}());\n</script>"
        '<script type="application/vnd.jupyter.widget-view+json">{}</script>'
        '<script type="application/vnd.jupyter.widget-state+json">{}</script></body>'
    )
    html = offline.make_offline(page, "notebooks/05_varlen_batching/")
    assert (
        offline.external_loads(html) == [] and "unpkg" not in html and "mathjax.js" not in html
    )
    assert '<script src="../../vendor/requirejs/require.js"></script>' in html
    assert html.index("embed-amd.js") > html.index("require.js")
    assert offline.external_loads('<script src="https://cdn.example/x.js"></script>') == [
        "https://cdn.example/x.js"
    ]


def test_exercises_page_groups_problems_by_chapter_in_judge_order(tmp_path, caplog):
    chapters = load_hook("chapters")
    for slug, meta in {
        "rope": "chapter: 01_mini_llm\ndifficulty: medium\norder: 2",
        "rmsnorm": "chapter: 01_mini_llm\ndifficulty: easy\norder: 1",
        "paged-attention": "chapter: 04_paged_kv_cache\ndifficulty: hard\nrequires: [torch]",
        "broken": "chapter: 04_paged_kv_cache",
    }.items():
        (tmp_path / "practice" / "problems" / slug).mkdir(parents=True)
        (tmp_path / "practice" / "problems" / slug / "problem.md").write_text(
            f"---\ntitle: {slug.title()}\n{meta}\n---\n\n# {slug}\n"
        )
    text = chapters.exercises_markdown(tmp_path)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "judge.py" in line]
    assert [re.search(r"start (\S+)`", row).group(1) for row in rows] == [
        "rmsnorm",
        "rope",
        "paged-attention",
    ]
    assert rows[0].startswith("| 1 |") and "| hard | `torch` |" in rows[2]
    assert text.index("## 01_mini_llm") < text.index("## 04_paged_kv_cache")
    assert (
        "broken" in caplog.text and "difficulty" in caplog.text
    )  # a warning: --strict fails on it


# ------------------------------------------------------------------ the built pages, read as
#   files

# Words about how the book was made or tested, which a reader was never given.
PROCESS_WORDS = re.compile(
    r"\bseeds?'|\bthe seeds\b|\bsource (?:chapter|reports?|engine)s?\b|started from"
    r"|\bnbval\b|\bpytest\b|\bin CI\b|\bCI (?:runs|checks)\b|not (?:checked|compared) in",
    re.IGNORECASE,
)


def built_pages(site: Path) -> list[Path]:
    return sorted(
        p for p in site.rglob("*.html") if p.name != "404.html" and "fixture" not in p.parts
    )


def page_soup(path: Path) -> BeautifulSoup:
    return BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")


def prose_text(soup: BeautifulSoup) -> str:
    """The article's words as a reader reads them: no code blocks, no cell outputs, no
    scripts."""
    article = soup.select_one("article") or soup
    for element in article.select(
        "pre, script, style, .jp-OutputArea, .jp-InputArea-editor, "
        ".highlight, .zeroclipboard-container, .clipboard-copy-txt"
    ):
        element.decompose()
    return " ".join(article.get_text(" ").split())


def test_every_in_site_link_and_anchor_resolves(site):
    ids: dict[Path, set[str]] = {}
    broken = []
    for page in built_pages(site):
        for a in page_soup(page).select("a[href]"):
            href = a["href"]
            if re.match(r"^[a-z][a-z0-9+.-]*:", href) or href.startswith("//"):
                # another site (the repository link when MINILLM_REPO_URL is set), mailto:,
                # data:
                continue
            path, _, anchor = href.partition("#")
            target = (page.parent / urllib.parse.unquote(path)).resolve() if path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{page.relative_to(site)}: {href} (no such page)")
                continue
            if anchor and target.suffix == ".html":
                if target not in ids:
                    ids[target] = {tag["id"] for tag in page_soup(target).select("[id]")}
                if urllib.parse.unquote(anchor) not in ids[target]:
                    broken.append(f"{page.relative_to(site)}: {href} (no #{anchor} there)")
    assert broken == [], "\n".join(sorted(set(broken)))


def test_every_exercise_has_a_page_linked_from_the_list_and_from_its_chapter(site):
    chapters = load_hook("chapters")
    problems = chapters.read_problems(ROOT)
    listing = page_soup(site / "exercises" / "index.html")
    linked = {
        a["href"].strip("./").rstrip("/") for a in listing.select("article table a[href]")
    }
    missing = [p["slug"] for p in problems if p["slug"] not in linked]
    assert missing == [], f"exercises listed without a link to their statement: {missing}"
    for problem in problems:
        page = site / "exercises" / problem["slug"] / "index.html"
        assert page.is_file(), f"no page for the exercise {problem['slug']}"
        soup = page_soup(page)
        assert str(problem["title"]) in soup.select_one("article h1").get_text()
        hints = soup.select("article details")
        assert hints and "hint" in hints[0].select_one("summary").get_text().lower(), (
            f"{problem['slug']}: the hints are not folded"
        )
        assert f"judge.py start {problem['slug']}" in soup.get_text()
        chapter_page = site / "notebooks" / problem["chapter"] / "index.html"
        if chapter_page.is_file():
            hrefs = {
                a["href"]
                for a in page_soup(chapter_page).select(".jp-RenderedMarkdown a[href]")
            }
            assert f"../../exercises/{problem['slug']}/" in hrefs, (
                f"chapter {problem['chapter']} does not link its exercise {problem['slug']}"
            )


def test_prose_never_speaks_of_how_the_book_was_made_or_tested(site):
    found = {}
    for page in built_pages(site):
        words = sorted(
            {m.group(0) for m in PROCESS_WORDS.finditer(prose_text(page_soup(page)))}
        )
        if words:
            found[str(page.relative_to(site))] = words
    assert found == {}, f"process words in prose: {found}"


def test_chapters_refer_only_to_chapters_that_exist(site):
    existing = {
        int(notebook.stem[:2]) for notebook in CHAPTERS
    }  # a chapter's number is its notebook's prefix
    ahead = {}
    for page in built_pages(site):
        numbers = {
            int(n) for n in re.findall(r"\b[Cc]hapters? (\d+)\b", prose_text(page_soup(page)))
        }
        if numbers - existing:
            ahead[str(page.relative_to(site))] = sorted(numbers - existing)
    assert ahead == {}, (
        f"references to chapters that do not exist (there are {sorted(existing)}): {ahead}"
    )


def test_every_chapter_has_the_same_self_test_and_closing_blocks(site):
    for notebook in CHAPTERS:
        soup = page_soup(site / "notebooks" / notebook.stem / "index.html")
        boxes = soup.select(".admonition.question h2")
        assert [h.get_text().replace("¶", "").strip() for h in boxes] == [
            "What you will be able to answer"
        ], f"{notebook.stem}: no self-test block"
        questions = boxes[0].find_parent(class_="admonition").select("ol > li")
        answers = [li for li in questions if li.select_one("details > summary")]
        assert len(questions) >= 3 and answers == questions, (
            f"{notebook.stem}: a question without its folded answer"
        )
        for kind, title in [
            ("info", "How the real engines do it"),
            ("abstract", "Summary"),
            ("example", "Exercises"),
        ]:
            assert soup.select_one(f".admonition.{kind} > h2"), (
                f"{notebook.stem}: no '{title}' block"
            )
    last = page_soup(site / "notebooks" / CHAPTERS[-1].stem / "index.html")
    assert last.select_one(".admonition.tip > h2[id^='where-next']"), (
        "the last chapter does not say where next"
    )


def test_glossary_defines_the_words_chapters_link_to(site):
    glossary = page_soup(site / "glossary" / "index.html")
    terms = {dt["id"] for dt in glossary.select("dl dt[id]")}
    assert {"ttft", "itl", "tensor-parallelism", "query-start-loc", "slot-mapping"} <= terms
    assert "cu_seqlens_q" in glossary.get_text()
    for notebook in CHAPTERS:
        soup = page_soup(site / "notebooks" / notebook.stem / "index.html")
        links = [a["href"] for a in soup.select("a.glossary-term")]
        assert len(links) >= 5, f"{notebook.stem}: only {len(links)} glossary links"
        assert len(links) == len(set(links)), (
            f"{notebook.stem}: a glossary word is linked twice"
        )


def test_search_index_has_no_prompts_copy_text_or_pilcrows(site):
    docs = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))[
        "docs"
    ]
    assert [d["title"] for d in docs if "¶" in d["title"]] == []
    noisy = [d["location"] for d in docs if re.search(r"In \[\d*\]:|Copied!|nbval", d["text"])]
    assert noisy == [], f"search entries with prompts or copy-button text: {noisy[:5]}"


# ------------------------------------------------------------------ the browser


@pytest.fixture(scope="module")
def server(site):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(site))
    )
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}/"
    httpd.shutdown()
    thread.join()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if os.environ.get("MINILLM_SKIP_BROWSER") == "1":
        pytest.skip("MINILLM_SKIP_BROWSER=1: browser checks of the site skipped on purpose")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        executable = (
            CHROMIUM if Path(CHROMIUM).exists() else None
        )  # None: Playwright's own build
        if executable is None and not Path(playwright.chromium.executable_path).exists():
            pytest.fail(
                f"no Chromium: {CHROMIUM} is missing and Playwright's own build is not "
                "installed; "
                "`make test` installs one, or set MINILLM_SKIP_BROWSER=1 to skip the browser "
                "checks"
            )
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=executable,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1280, "height": 900},
        )
        yield context
        context.close()


REQUEST_LOG: dict[str, dict] = {}


@pytest.fixture
def visit(browser, server):
    """Open a site path; afterwards assert that every request stayed on 127.0.0.1 and
    succeeded."""
    pages = []

    def open_page(path: str):
        page = browser.new_page()
        record = {"requests": [], "outside": [], "failed": [], "errors": []}
        local = lambda url: url.startswith((server, "data:", "blob:", "about:"))  # noqa: E731

        def route(
            r,
        ):  # anything bound off the machine is aborted, and recorded as a failure of the test
            if local(r.request.url):
                r.continue_()
            else:
                record["outside"].append(r.request.url)
                r.abort()

        page.route("**/*", route)
        page.on("request", lambda req: record["requests"].append(req.url.replace(server, "/")))
        page.on(
            "requestfailed", lambda req: record["failed"].append(f"{req.url} ({req.failure})")
        )
        page.on(
            "response",
            lambda res: (
                res.status >= 400 and record["failed"].append(f"{res.url} ({res.status})")
            ),
        )
        page.on(
            "console", lambda msg: msg.type == "error" and record["errors"].append(msg.text)
        )
        page.on("pageerror", lambda exc: record["errors"].append(str(exc)))
        page.goto(server + path, wait_until="load")
        page.evaluate("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
        pages.append((path, page, record))
        return page

    yield open_page
    for path, page, record in pages:
        page.close()
        REQUEST_LOG[path or "/"] = {"count": len(record["requests"]), **record}
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "site-requests.json").write_text(json.dumps(REQUEST_LOG, indent=1))
        assert record["outside"] == [], f"{path}: requests left the machine"
        assert record["failed"] == [], f"{path}: requests failed"
        assert record["errors"] == [], f"{path}: errors in the page"


def heading(locator) -> str:
    return locator.first.inner_text().replace("¶", "").strip()  # without the permalink sign


def screenshot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def test_home_page_renders_with_math_search_and_dark_mode(visit):
    page = visit("")
    assert "minillm" in page.title()
    assert heading(page.locator("article h1")) == "Build an LLM inference engine"
    assert page.locator("mjx-container").count() >= 2, (
        "MathJax did not typeset the home page's formulas"
    )
    chapter_links = page.locator("table a[href^='notebooks/']")
    assert chapter_links.count() == len(CHAPTERS)
    page.locator("label.md-header__button[for^='__palette']:visible").click()
    assert page.locator("body").get_attribute("data-md-color-scheme") == "slate"
    page.locator("label.md-header__button[for^='__palette']:visible").click()  # back to light
    page.locator("input.md-search__input").click()
    page.keyboard.type("paged attention")  # the search index is served by the site too
    page.wait_for_selector(".md-search-result__item", timeout=10_000)


@pytest.mark.parametrize("path", ["how-to-use/", "exercises/", "glossary/"])
def test_book_pages_render(visit, path):
    page = visit(path)
    assert page.locator("article h1").count() == 1
    if path == "glossary/":
        assert page.locator("mjx-container").count() >= 2, (
            "MathJax did not typeset the glossary"
        )


def stored_outputs(notebook: Path) -> tuple[list[str], int, int, bool]:
    """What the page must show: printed lines, PNG figures, widget views, and whether prose has
    $math$."""
    cells = [
        cell
        for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        if LAB_ONLY not in cell["metadata"].get("tags", [])
    ]  # the site leaves these cells out
    outputs = [
        out for cell in cells if cell["cell_type"] == "code" for out in cell.get("outputs", [])
    ]
    printed = [
        line
        for out in outputs
        if out["output_type"] == "stream"
        for line in "".join(out["text"]).splitlines()
        if line.strip()
    ]
    images = sum("image/png" in out.get("data", {}) for out in outputs)
    widgets = sum(WIDGET_VIEW in out.get("data", {}) for out in outputs)
    prose = "".join(
        "".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown"
    )
    return printed, images, widgets, re.search(r"\$[^$\s][^$]*\$", prose) is not None


def shown_sources(notebook: Path) -> int:
    """How many outputs show the engine's code as a Python block
    (minillm.notebook.show.source)."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    outputs = [
        out for cell in cells if cell["cell_type"] == "code" for out in cell.get("outputs", [])
    ]
    return sum(
        "".join(out.get("data", {}).get("text/markdown", "")).startswith("```python")
        for out in outputs
    )


@pytest.mark.parametrize("notebook", CHAPTERS, ids=[nb.stem for nb in CHAPTERS])
def test_chapter_page_shows_the_engines_code_highlighted(site, visit, notebook):
    sources = shown_sources(notebook)
    getsource = "print(inspect.getsource" in notebook.read_text(encoding="utf-8")
    assert not getsource, (
        f"{notebook.name} prints source as plain text: use minillm.notebook.show.source"
    )
    page = visit(f"notebooks/{notebook.stem}/")
    highlighted = page.locator(".jp-OutputArea-output .book-source pre").evaluate_all(
        "blocks => blocks.filter(b => b.querySelector('.k, .kn, .kd') && "
        "getComputedStyle(b.querySelector('.k, .kn, .kd')).color"
        " !== getComputedStyle(b).color).length"
    )
    assert highlighted >= sources, (
        f"{highlighted} highlighted code blocks on the page, the notebook shows {sources}"
    )


@pytest.mark.parametrize("notebook", CHAPTERS, ids=[nb.stem for nb in CHAPTERS])
def test_chapter_page_shows_its_stored_outputs(site, visit, notebook):
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    unexecuted = [
        i
        for i, cell in enumerate(cells)
        if cell["cell_type"] == "code" and cell["execution_count"] is None
    ]
    assert unexecuted == [], (
        f"{notebook.name} is committed unexecuted (cells {unexecuted[:5]}...): the site shows "
        "stored outputs, so run `jupyter nbconvert --to notebook --execute --inplace` on it"
    )
    chapters = load_hook("chapters")
    page = visit(f"notebooks/{notebook.stem}/")
    title = chapters.notebook_title(notebook)
    assert title in page.title()
    download = page.locator("a[download]").get_attribute("href")
    assert (site / "notebooks" / notebook.stem / download).is_file(), "no downloadable notebook"
    assert heading(page.locator(".jp-RenderedMarkdown h1")) == title
    assert page.locator(".jp-RenderedMarkdown h2").count() >= 1, "no section headings"
    printed, images, widgets, has_math = stored_outputs(notebook)
    shown = page.locator(".jp-OutputArea").all_inner_texts()
    for line in (
        printed[:1] + printed[-1:]
    ):  # the first and the last printed line of the chapter
        assert any(line.strip() in text for text in shown), (
            f"printed output {line!r} is not on the page"
        )
    drawn = page.locator(".jp-OutputArea img").evaluate_all(
        "imgs => imgs.filter(i => i.complete && i.naturalWidth > 0 && i.offsetHeight > "
        "0).length"
    )
    assert drawn >= images, f"{drawn} figures drawn, the notebook stores {images}"
    if has_math:
        assert page.locator(".jp-RenderedMarkdown mjx-container").count() >= 1, (
            "MathJax did not typeset"
        )
    if widgets:
        page.wait_for_function(
            f"() => document.querySelectorAll('.widget-subarea > *').length >= {widgets}",
            timeout=20_000,
        )
    for lens_text in page.locator(".minillm-padding-waste").evaluate_all(
        "divs => divs.map(d => d.getAttribute('data-live') ? d.dataset.queryLens : null)"
    ):
        assert lens_text is not None, "a padding-waste widget did not come alive"
        lens = [int(n) for n in lens_text.split(",")]
        assert (
            wasted_percent(lens)
            in page.locator(".minillm-padding-waste .mpw-wasted").all_inner_texts()
        )
    if notebook.stem.startswith("05_"):
        assert widgets or page.locator(".minillm-padding-waste[data-live]").count(), (
            "chapter 5 has no widget"
        )
    live = page.locator(
        ".minillm-padding-waste[data-live], .minillm-slot-memory[data-live], "
        ".widget-subarea:has(> *)"
    )
    for i in range(live.count()):  # a close-up of each widget next to the full page
        live.nth(i).screenshot(path=str(SCREENSHOTS / f"{notebook.stem}-widget-{i + 1}.png"))


# ------------------------------------------------------------------ the padding-waste widget on
#   its own


FIXTURE = """<!doctype html><html><head><meta charset="utf-8"><link rel="stylesheet" href="../assets/book.css">
</head><body>
<div class="minillm-padding-waste" id="preset" data-query-lens="2000,512,1,1,1,1,1,1">fallback</div>
<div class="minillm-padding-waste" id="bad" data-query-lens="2000,zero">static fallback kept</div>
<script src="../assets/controls.js"></script><script src="../assets/padding-waste.js"></script></body></html>"""


def test_padding_waste_widget_updates_as_the_reader_edits(site, visit):
    (site / "fixture").mkdir(exist_ok=True)
    (site / "fixture" / "padding-waste.html").write_text(FIXTURE)
    page = visit("fixture/padding-waste.html")
    widget = page.locator("#preset")
    wasted = widget.locator(".mpw-wasted")
    assert wasted.inner_text() == "84%" == wasted_percent([2000, 512, 1, 1, 1, 1, 1, 1])
    assert widget.locator("svg rect").count() > 8
    widget.locator("input").nth(0).fill("512")
    assert wasted.inner_text() == wasted_percent([512, 512, 1, 1, 1, 1, 1, 1])
    widget.locator("input").nth(1).fill(
        "0"
    )  # rejected: the picture keeps the last valid length
    assert "1 to 32768" in widget.locator(".mpw-message").inner_text()
    assert wasted.inner_text() == wasted_percent([512, 512, 1, 1, 1, 1, 1, 1])
    widget.get_by_role("button", name="all decode").click()
    assert wasted.inner_text() == "0%"
    widget.get_by_role("button", name="+ add a decode request").click()
    widget.get_by_role("button", name="remove request 1").click()
    assert widget.locator("input").count() == 8
    widget.locator("input").nth(0).fill("9")
    assert wasted.inner_text() == wasted_percent([9, 1, 1, 1, 1, 1, 1, 1])
    widget.get_by_role("button", name="all prefill").click()
    assert wasted.inner_text() == wasted_percent([512, 384, 640, 256, 768, 448, 320, 576])
    assert page.locator("#bad").inner_text() == "static fallback kept"
    screenshot(page, "padding-waste-fixture")


# ------------------------------------------------------------------ every page, on a laptop and
#   on a phone

LAYOUT_CHECKS = """() => {
  const visible = (el) => el.offsetParent !== null && el.getClientRects().length > 0;
  const out = {scrollWidth: document.documentElement.scrollWidth, wrapped: [], clipped: []};
  // Printed output keeps its lines: white-space pre, and no taller than its number of lines.
  for (const pre of document.querySelectorAll(".jp-OutputArea-output pre")) {
    if (!visible(pre)) continue;
    const style = getComputedStyle(pre);
    const lines = pre.textContent.replace(/\\n$/, "").split("\\n").length;
    const lineHeight = parseFloat(style.lineHeight) || 1.3 * parseFloat(style.fontSize);
    const text = pre.clientHeight - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom);
    if (style.whiteSpace !== "pre" || text > (lines + 0.5) * lineHeight) out.wrapped.push(pre.textContent.slice(0, 70));
  }
  // A display formula either fits its box or its box scrolls; and the box stays inside the article.
  const article = document.querySelector("article") || document.body;
  const page = article.getBoundingClientRect();
  for (const box of document.querySelectorAll("mjx-container[display='true']")) {
    if (!visible(box)) continue;
    const r = box.getBoundingClientRect();
    const math = (box.querySelector("mjx-math") || box).getBoundingClientRect();
    const scrolls = ["auto", "scroll"].includes(getComputedStyle(box).overflowX);
    const fits = math.left >= r.left - 1 && math.right <= r.right + 1;
    if (!(fits || scrolls) || r.left < page.left - 1 || r.right > page.right + 1)
      out.clipped.push(box.textContent.slice(0, 50) || box.outerHTML.slice(0, 80));
  }
  // The engine's own code (show.source) fits the code column: no sideways scroll inside a function.
  out.wideSource = [...document.querySelectorAll(".book-source pre")].filter(visible)
    .filter((pre) => pre.scrollWidth > pre.clientWidth + 1)
    .map((pre) => pre.textContent.split("\\n").reduce((a, b) => (b.length > a.length ? b : a), "").slice(0, 70));
  const code = document.querySelector(".jp-CodeCell .jp-InputArea-editor");
  out.codeWidth = code ? code.getBoundingClientRect().width : null;
  out.prompts = [...document.querySelectorAll(".jp-InputPrompt, .jp-OutputPrompt")].filter(visible).length;
  // Figures the page stores (not those a saved widget draws at run time).
  const figures = [...document.querySelectorAll(".jp-OutputArea img")].filter((img) => !img.closest(".widget-subarea"));
  out.narrowFigures = figures.filter(visible).filter((img) => img.getBoundingClientRect().width < 0.9 * page.width).length;
  out.unlinkedFigures = figures.filter((img) => !img.closest("a.book-figure[href$='.png']")).length;
  return out;
}"""


def site_pages(site: Path) -> list[str]:
    return [
        str(p.parent.relative_to(site)).replace(".", "") + "/" if p.parent != site else ""
        for p in built_pages(site)
        if p.name == "index.html" and p.parent.name != "search"
    ]


def test_every_page_reads_well_at_1280_and_390_px(site, browser, server):
    pages = site_pages(site)
    assert len(pages) >= 5 + len(CHAPTERS)
    problems = {}
    tab = browser.new_page()
    try:
        for width, height in [(1280, 900), (390, 844)]:
            tab.set_viewport_size({"width": width, "height": height})
            for path in pages:
                tab.goto(server + path, wait_until="load")
                tab.evaluate(
                    "() => window.MathJax && MathJax.startup && MathJax.startup.promise"
                )
                found = tab.evaluate(LAYOUT_CHECKS)
                name = (path.strip("/").replace("/", "-") or "home") + f"-{width}"
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                # JPEG: a whole chapter page is tens of thousands of pixels tall, and PNG's
                # encoder took twice as long as loading the page
                tab.screenshot(
                    path=str(SCREENSHOTS / f"{name}.jpg"), full_page=True, quality=80
                )
                issues = []
                if width == 390 and found["scrollWidth"] > width:
                    issues.append(f"the page scrolls sideways ({found['scrollWidth']} px wide)")
                if found["wrapped"]:
                    issues.append(f"output lines wrap: {found['wrapped'][:3]}")
                if found["clipped"]:
                    issues.append(f"formulas cut off: {found['clipped'][:3]}")
                if found["unlinkedFigures"]:
                    issues.append(f"{found['unlinkedFigures']} figures do not open full size")
                if width == 1280 and found["wideSource"]:
                    issues.append(f"engine code scrolls sideways at: {found['wideSource'][:3]}")
                if (
                    width == 1280
                    and found["codeWidth"] is not None
                    and found["codeWidth"] < 0.6 * width
                ):
                    issues.append(f"code column only {found['codeWidth']:.0f} px wide")
                if width == 390 and found["prompts"]:
                    issues.append(f"{found['prompts']} prompts still take width on a phone")
                if width == 390 and found["narrowFigures"]:
                    issues.append(f"{found['narrowFigures']} figures narrower than the column")
                if issues:
                    problems[name] = issues
    finally:
        tab.close()
    assert problems == {}, "\n".join(
        f"{name}: {'; '.join(issues)}" for name, issues in problems.items()
    )


# ------------------------------------------------------------------ live controls: none dead,
#   same numbers as the notebook


def test_offline_hook_drops_widget_state_that_no_view_uses():
    offline = load_hook("offline")
    page = (
        '<p>text</p><script type="application/vnd.jupyter.widget-state+json">\n{"state": '
        "{}}\n</script>\n"
        "<script>\n(function() {\n  function addWidgetsRenderer() {\n  "
        "}\n}());\n</script></body>"
    )
    html = offline.make_offline(page, "notebooks/03_kv_slots/")
    assert "widget-state" not in html and "require.js" not in html and "embed-amd" not in html
    assert html.startswith("<p>text</p>")


# A control a reader can change: inside the chapter's content, not the theme's copy buttons or
# tabs.
CONTROL = ":is(input, select, textarea, button):not(.md-clipboard):not(.md-code__button):not(.tabbed-set > input)"
LIVE_ROOT = "[data-live]"


def control_state(root) -> str:
    """What a change must alter: the control's pictures, lines and readouts."""
    return root.evaluate(
        "r => [...r.querySelectorAll('svg, p, output')].map(n => n.outerHTML).join('')"
    )


def change(page, root, control) -> str:
    """Change one control as a reader would; return what was done."""
    tag, kind = control.evaluate("e => [e.tagName.toLowerCase(), e.type]")
    if tag == "select":
        values = control.locator("option").evaluate_all("os => os.map(o => o.value)")
        other = next(v for v in values if v != control.input_value())
        control.select_option(other)
        return f"select {other!r}"
    if kind == "range":
        at_max = control.evaluate("e => Number(e.value) >= Number(e.max)")
        control.focus()
        control.press("ArrowLeft" if at_max else "ArrowRight")
        return "slide"
    if kind == "number":
        value = int(control.input_value())
        control.fill(str(value - 1 if value > 1 else value + 1))
        return f"type {value} -> {control.input_value()}"
    label = control.get_attribute("aria-label") or control.inner_text()
    control.click()
    return f"click {label!r}"


@pytest.mark.parametrize("notebook", CHAPTERS, ids=[nb.stem for nb in CHAPTERS])
def test_no_widget_control_on_a_chapter_page_is_dead(visit, notebook):
    page = visit(f"notebooks/{notebook.stem}/")
    content = page.locator("article .jupyter-wrapper")
    assert content.locator(".jupyter-widgets, .widget-subarea").count() == 0, (
        "an ipywidget is drawn on the static page, where no kernel can drive it: tag its cell "
        "jupyterlab-only"
    )
    dead = content.locator(f"{CONTROL}:not({LIVE_ROOT} *)")
    assert dead.count() == 0, (
        "controls outside any live control: "
        f"{dead.evaluate_all('cs => cs.map(c => c.outerHTML)')}"
    )
    roots = content.locator(LIVE_ROOT)
    for r in range(roots.count()):
        root = roots.nth(r)
        root.scroll_into_view_if_needed()
        for i in range(root.locator(CONTROL).count()):
            controls = root.locator(CONTROL)  # found again each time: a change may redraw them
            if (
                i >= controls.count()
                or not controls.nth(i).is_visible()
                or controls.nth(i).is_disabled()
            ):
                continue
            if controls.nth(i).evaluate("e => e.tagName") == "BUTTON":
                number = root.locator(
                    "input[type=number]"
                ).first  # leave every preset first, so a click must show
                if number.count():
                    number.fill("7777")
            before = control_state(root)
            done = change(page, root, controls.nth(i))
            assert control_state(root) != before, (
                f"{notebook.stem}: control {i} of live control {r} is dead ({done})"
            )


@pytest.mark.parametrize("notebook", CHAPTERS, ids=[nb.stem for nb in CHAPTERS])
def test_no_figure_appears_twice_on_a_chapter_page(visit, notebook):
    page = visit(f"notebooks/{notebook.stem}/")
    sources = page.locator("article img").evaluate_all(
        "imgs => imgs.map(i => i.getAttribute('src'))"
    )
    repeated = {src[:80] for src in sources if sources.count(src) > 1}
    assert repeated == set(), f"the same figure is shown more than once: {repeated}"


CONTROLS_FIXTURE = """<!doctype html><html><head><meta charset="utf-8"></head><body>
<div class="minillm-slot-memory" id="bad" data-slots="0">static fallback kept</div>
<script src="../assets/controls.js"></script><script src="../assets/padding-waste.js"></script>
<script src="../assets/slot-memory.js"></script></body></html>"""


def test_live_controls_print_what_the_notebook_prints(site, visit):
    """The site's scripts and minillm.notebook.widgets agree on presets, models and every
    printed line, digit for digit."""
    from minillm.notebook.widgets import (
        CONTEXTS,
        MAX_REQUESTS,
        MAX_SLOTS,
        MAX_TOKENS,
        MODELS,
        PRESETS,
        padding_waste,
        slot_memory,
    )

    (site / "fixture").mkdir(exist_ok=True)
    (site / "fixture" / "controls.html").write_text(CONTROLS_FIXTURE)
    page = visit("fixture/controls.html")
    js = page.evaluate(
        "() => [minillmPaddingWaste.PRESETS, minillmPaddingWaste.MAX_REQUESTS, "
        "minillmPaddingWaste.MAX_TOKENS,"
        " minillmSlotMemory.MODELS, minillmSlotMemory.CONTEXTS, minillmSlotMemory.MAX_SLOTS]"
    )
    assert {p["name"]: p["lens"] for p in js[0]} == PRESETS and js[1:3] == [
        MAX_REQUESTS,
        MAX_TOKENS,
    ]
    assert {m["name"]: (m["layers"], m["kvHeads"], m["headDim"]) for m in js[3]} == MODELS
    assert js[4:] == [list(CONTEXTS), MAX_SLOTS]
    lens_cases = [
        *PRESETS.values(),
        [25] * 7 + [24],
        [2] + [1] * 7,
        [32768] + [1] * 15,
        [7],
        [3, 5, 11, 13],
    ]
    got = page.evaluate(
        "cases => cases.map(l => { const s = minillmPaddingWaste.summary(l);"
        " return s.before + s.percent + s.after; })",
        lens_cases,
    )
    assert got == [padding_waste(lens).summary() for lens in lens_cases]
    cases = [
        (name, slots, ctx) for name in MODELS for slots in (1, 3, 12, 16) for ctx in CONTEXTS
    ]
    got = page.evaluate(
        "cases => cases.map(([name, slots, ctx]) => minillmSlotMemory.summary("
        "minillmSlotMemory.slotMemory(minillmSlotMemory.MODELS.find(m => m.name === name), "
        "slots, ctx)))",
        [list(c) for c in cases],
    )
    assert got == [slot_memory(*c).summary() for c in cases]
    assert page.locator("#bad").inner_text() == "static fallback kept"


def test_chapter_3_memory_control_follows_its_controls(visit):
    from minillm.notebook.widgets import slot_memory

    page = visit("notebooks/03_kv_slots/")
    root = page.locator(".minillm-slot-memory[data-live]")
    assert root.count() == 1, "chapter 3's memory control did not come alive"
    root.scroll_into_view_if_needed()
    title, line = root.locator(".msm-title"), root.locator(".msm-summary")
    assert title.text_content() == slot_memory("27B-class, TP2", 4, 65_536).title()
    assert root.locator(".msm-bar").get_attribute("class") == "msm-bar msm-over"
    root.locator("input.msm-slots").focus()
    for _ in range(2):
        page.keyboard.press("ArrowLeft")  # 4 -> 2 slots: 16 GiB, under the budget
    assert line.text_content() == slot_memory("27B-class, TP2", 2, 65_536).summary()
    assert root.locator(".msm-bar").get_attribute("class") == "msm-bar msm-fits"
    root.locator("select.msm-model").select_option("Qwen3-8B")
    root.locator("input.msm-context").focus()
    page.keyboard.press("ArrowRight")  # 65,536 -> 131,072 tokens
    assert title.text_content() == slot_memory("Qwen3-8B", 2, 131_072).title()
    assert line.text_content() == slot_memory("Qwen3-8B", 2, 131_072).summary()
    assert root.locator(".msm-readout").all_text_contents() == ["2", "131,072"]
    root.screenshot(path=str(SCREENSHOTS / "03_kv_slots-memory-control.png"))
