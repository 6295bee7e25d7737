"""Keep the book offline: point chapter pages at the vendored scripts in docs/vendor/, never a
CDN.

nbconvert's templates (through mkdocs-jupyter) write three loaders into every chapter page:
- MathJax 2 from cdnjs plus its text/x-mathjax-config block: removed, since every page already
  loads the vendored MathJax 3 (mkdocs.yml extra_javascript, configured by
  assets/mathjax-config.js);
- a script that appends the widget embedder from unpkg at DOMContentLoaded: removed, and pages
  with saved widget state get the vendored require.js and embed-amd.js at the end of <body>
  instead. There they run after the theme's bundle, whose UMD parts would otherwise register
  with require.js and fail. A page that shows no widget view (the book's ipywidgets cells are
  jupyterlab-only) loses the state too;
- a mermaid loader that imports from cdnjs when a page has a mermaid output: removed when it has
  none.
Any script, stylesheet or import still aimed at another host is then a warning, so
`mkdocs build --strict` fails instead of shipping a page that calls out.
"""

from __future__ import annotations

import logging
import re

from mkdocs.utils import get_relative_url

log = logging.getLogger("mkdocs.hooks.offline")

MATHJAX2_BLOCK = re.compile(
    r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.DOTALL
)
WIDGETS_LOADER = re.compile(
    r"<script>\s*\(function\(\) \{\s*function addWidgetsRenderer\(\).*?\}\(\)\);\s*</script>",
    re.DOTALL,
)
MERMAID_LOADER = re.compile(
    r'<script type="module">\s*document\.addEventListener\("DOMContentLoaded", async \(\) => '
    r"\{\s*"
    r'const diagrams = document\.querySelectorAll\("\.jp-Mermaid > '
    r'pre\.mermaid"\);.*?</script>',
    re.DOTALL,
)
WIDGET_STATE = 'type="application/vnd.jupyter.widget-state+json"'
WIDGET_VIEW = 'type="application/vnd.jupyter.widget-view+json"'
# the saved state of a notebook's widgets; useless on a page that shows none of them (their
# cells are tagged jupyterlab-only and left out), so it is dropped there together with the
# embedder
WIDGET_STATE_BLOCK = re.compile(
    r'<script type="application/vnd\.jupyter\.widget-state\+json">.*?</script>\s*', re.DOTALL
)
# src=/href= on script and link tags, and import("...") in inline modules, that leave the site
EXTERNAL_LOAD = re.compile(
    r"""<(?:script|link)\b[^>]*?\b(?:src|href)\s*=\s*["']((?:https?:)?//[^"']+)["']"""
    r"""|\bimport\s*\(\s*["']((?:https?:)?//[^"']+)["']""",
    re.IGNORECASE,
)
WIDGET_SCRIPTS = """<script src="{require_js}"></script>
<script>
  // Widget modules fetch their icon fonts next to their own URL: make that the vendored folder.
  window.__jupyter_widgets_assets_path__ = new URL("{assets}", document.baseURI).href;
  require.config({{baseUrl: window.__jupyter_widgets_assets_path__,
                  paths: {{"@jupyter-widgets/html-manager/dist": ".",
                           "@jupyter-widgets": "."}}}});
</script>
<script src="{embed_amd}"></script>
"""


def make_offline(html: str, page_url: str) -> str:
    """The page with the CDN loaders removed and, where it has widget state, the vendored
    embedder."""
    html = MATHJAX2_BLOCK.sub("", html)
    if '<div class="jp-Mermaid">' not in html:
        html = MERMAID_LOADER.sub("", html)
    html, loaders = WIDGETS_LOADER.subn("", html)
    if WIDGET_VIEW not in html:
        html = WIDGET_STATE_BLOCK.sub("", html)
    if loaders and WIDGET_STATE in html:
        tags = WIDGET_SCRIPTS.format(
            require_js=get_relative_url("vendor/requirejs/require.js", page_url),
            assets=get_relative_url("vendor/html-manager/", page_url).rstrip("/") + "/",
            embed_amd=get_relative_url("vendor/html-manager/embed-amd.js", page_url),
        )
        head, body_end, tail = html.rpartition("</body>")
        html = head + tags + body_end + tail if body_end else html + tags
    return html


def external_loads(html: str) -> list[str]:
    return [m.group(1) or m.group(2) for m in EXTERNAL_LOAD.finditer(html)]


def on_post_page(output, page, config):
    output = make_offline(output, page.url)
    for url in external_loads(output):
        log.warning(
            "%s still loads %s from outside the site; vendor it under docs/vendor/",
            page.file.src_uri,
            url,
        )
    return output
