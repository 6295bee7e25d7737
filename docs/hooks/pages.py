"""Make a chapter page read like a page of the book, not like a notebook dump.

mkdocs-jupyter renders each executed notebook as it is; on_page_content then, on chapter pages
only:
- keeps prompts ("In [3]:"), the copy button's text and its hidden copy of the code out of
  search, and gives headings the theme's own permalink (so search titles do not end in "¶");
- drops cell tags (they are for the tools that run the notebooks, not for the reader);
- turns links written for JupyterLab (`../docs/glossary.md#ttft`,
  `../practice/problems/rope/problem.md`, `02_kv_cache.ipynb`) into the site's URLs;
- links the first use of each glossary term in the chapter's prose to its definition;
- draws the recurring blocks (self-test, checks, how the real engines do it, summary, exercises,
  where next, "Try it") as the theme's admonitions;
- moves figures out of the page into PNG files next to it, each a link to itself, so a tap opens
  the figure full size and the page loads faster;
- points the table of contents at the ids the headings really have.
On Markdown pages nothing here runs: Markdown gets admonitions and permalinks from mkdocs
itself.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
from pathlib import Path

from bs4 import BeautifulSoup, NavigableString

log = logging.getLogger("mkdocs.hooks.pages")

SEARCH_EXCLUDED = (
    ".jp-InputPrompt",
    ".jp-OutputPrompt",
    ".zeroclipboard-container",
    ".clipboard-copy-txt",
)
# The recurring sections of a chapter, by heading text, and the admonition each one is drawn as.
SECTION_KINDS = [
    (re.compile(r"^what you will be able to answer", re.I), "question"),
    (re.compile(r"^(\d+\.\s*)?verification\b", re.I), "success"),
    (re.compile(r"^how the real engines do it", re.I), "info"),
    (re.compile(r"^summary$", re.I), "abstract"),
    (re.compile(r"^exercises$", re.I), "example"),
    (re.compile(r"^where next", re.I), "tip"),
]
TRY_IT = re.compile(r"^try it\b", re.I)
GLOSSARY_TERM = re.compile(r"^(?P<term>.+?)\s*\{\s*#(?P<id>[\w-]+)(?P<attrs>[^}]*)\}\s*$")
TERMS_ATTR = re.compile(r'data-terms="([^"]*)"')
CODE_ATTR = re.compile(r'data-code="([^"]*)"')
JUPYTER_LINK = re.compile(
    r"^(?:\.\./docs/(?P<doc>[\w/-]+)\.md|\.\./practice/problems/(?P<slug>[\w-]+)/problem\.md"
    r"|(?:\./)?(?P<chapter>\d\d_\w+)\.ipynb)(?P<anchor>#.*)?$"
)
NOT_PROSE = {
    "a",
    "code",
    "pre",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "summary",
    "script",
    "style",
    "mjx-container",
}


def is_chapter(page) -> bool:
    return page.file.src_uri.endswith(".ipynb")


# ------------------------------------------------------------------ glossary terms


def read_glossary(path: Path) -> list[dict]:
    """Each term of docs/glossary.md: its anchor, the words that name it in prose, a one-line
    definition.

    A term is a definition-list entry written `Term { #anchor data-terms="word|other word" }`;
    the names in data-code="slot_mapping|..." match only inline code that says exactly that.
    Without either, the term's own text is the word to look for.
    """
    terms = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        match = GLOSSARY_TERM.match(line)
        if not match or i + 1 >= len(lines) or not lines[i + 1].startswith(":"):
            continue
        words, code = (
            TERMS_ATTR.search(match.group("attrs")),
            CODE_ATTR.search(match.group("attrs")),
        )
        term = match.group("term").strip()
        names = words.group(1).split("|") if words else []
        names += (
            ["`" + name for name in code.group(1).split("|")] if code else []
        )  # ` marks inline code
        if not names:
            names = ["`" + term.strip("`")] if term.startswith("`") else [term]
        definition = lines[i + 1].lstrip(": ").strip()
        for follow in lines[i + 2 :]:
            if not follow.startswith("    "):
                break
            definition += " " + follow.strip()
        first_sentence = re.split(r"(?<=[.:;])\s", definition, maxsplit=1)[0]
        tooltip = re.sub(r"\\\(|\\\)|`|\*", "", first_sentence)
        terms.append(
            {"id": match.group("id"), "names": [n for n in names if n], "title": tooltip}
        )
    return terms


def term_pattern(name: str) -> re.Pattern:
    """Whole words; a name with capitals after its first letter (TTFT, RoPE, TP) must match its
    case."""
    flags = 0 if any(c.isupper() for c in name[1:]) else re.I
    return re.compile(r"(?<![\w-])" + re.escape(name) + r"(?![\w-])", flags)


def link_glossary_terms(soup, terms: list[dict], glossary_url: str) -> int:
    """Link the first use of each term in the chapter's prose (inline code counts for code
    names)."""
    rendered = soup.select(".jp-MarkdownCell .jp-RenderedMarkdown")
    linked = 0
    for term in terms:
        done = False
        for cell in rendered:
            for node in list(cell.descendants):
                if done:
                    break
                done = _link_in_node(soup, node, term, glossary_url)
            if done:
                linked += 1
                break
    return linked


def _link_in_node(soup, node, term, glossary_url) -> bool:
    parents = {p.name for p in node.parents}
    href = f"{glossary_url}#{term['id']}"
    if node.name == "code" and not (parents & (NOT_PROSE - {"code"})):
        text = node.get_text()
        if any(name.startswith("`") and text == name[1:] for name in term["names"]):
            link = soup.new_tag(
                "a", href=href, title=term["title"], attrs={"class": "glossary-term"}
            )
            node.wrap(link)
            return True
        return False
    if not isinstance(node, NavigableString) or (parents & NOT_PROSE) or not node.strip():
        return False
    text = str(node)
    hits = [
        m
        for m in (term_pattern(n).search(text) for n in term["names"] if not n.startswith("`"))
        if m
    ]
    if not hits:
        return False
    hit = min(hits, key=lambda m: m.start())
    link = soup.new_tag("a", href=href, title=term["title"], attrs={"class": "glossary-term"})
    link.string = hit.group(0)
    node.replace_with(
        NavigableString(text[: hit.start()]), link, NavigableString(text[hit.end() :])
    )
    return True


# ------------------------------------------------------------------ links, sections, figures


def site_link(href: str) -> str | None:
    """The site URL (relative to a chapter page) of a link written for JupyterLab, or None."""
    match = JUPYTER_LINK.match(href)
    if not match:
        return None
    anchor = match.group("anchor") or ""
    if match.group("doc"):
        doc = match.group("doc")
        return f"../../{'' if doc == 'index' else doc + '/'}{anchor}"
    if match.group("slug"):
        return f"../../exercises/{match.group('slug')}/{anchor}"
    return f"../{match.group('chapter')}/{anchor}"


def rewrite_links(soup) -> None:
    for a in soup.select(".jp-RenderedMarkdown a[href]"):
        url = site_link(a["href"])
        if url is not None:
            a["href"] = url


def draw_admonitions(soup) -> None:
    """Wrap each recurring section of a markdown cell (heading to next heading) in an
    admonition."""
    for heading in soup.select(".jp-RenderedMarkdown h2, .jp-RenderedMarkdown h3"):
        title = heading.get_text().replace("¶", "").strip()
        kind = next((k for pattern, k in SECTION_KINDS if pattern.search(title)), None)
        if kind is None:
            continue
        box = soup.new_tag("div", attrs={"class": f"admonition {kind} book-section"})
        heading.insert_before(box)
        heading["class"] = heading.get("class", []) + ["admonition-title"]
        level = int(heading.name[1])
        members = [heading]
        for sibling in heading.next_siblings:
            if getattr(sibling, "name", None) in {f"h{n}" for n in range(1, level + 1)}:
                break
            members.append(sibling)
        for member in members:
            box.append(member.extract())
    for details in soup.select(".jp-RenderedMarkdown details"):
        if not details.get("class"):
            details["class"] = ["note"]  # a folded answer
    for strong in soup.select(".jp-RenderedMarkdown p > strong:first-child"):
        paragraph = strong.parent
        if TRY_IT.match(strong.get_text()) and paragraph.contents[0] is strong:
            box = soup.new_tag("div", attrs={"class": "admonition tip book-try"})
            paragraph.wrap(box)


def move_figures(soup, out_dir: Path) -> int:
    """Write each inline PNG next to the page and link it to itself (a tap opens it full
    size)."""
    moved = 0
    for img in soup.select(".jp-OutputArea img[src^='data:image/png;base64,']"):
        data = base64.b64decode(img["src"].split(",", 1)[1])
        name = f"figure-{hashlib.sha1(data).hexdigest()[:12]}.png"
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / name).write_bytes(data)
        img["src"] = name
        if img.parent.name != "a":
            img.wrap(
                soup.new_tag(
                    "a",
                    href=name,
                    title="Open the figure full size",
                    attrs={"class": "book-figure", "target": "_blank"},
                )
            )
        moved += 1
    return moved


def code_blocks_like_the_book(soup) -> None:
    """Code shown by minillm.notebook.show.source gets the same look as the code cells around
    it."""
    for block in soup.select(".jp-OutputArea-output.jp-RenderedMarkdown div.highlight"):
        block["class"] = ["highlight-ipynb", "hl-python", "book-source"]


def tidy_for_search(soup) -> None:
    for selector in SEARCH_EXCLUDED:
        for element in soup.select(selector):
            element["data-search-exclude"] = ""
    for toolbar in soup.select(".celltoolbar"):
        toolbar.decompose()
    for anchor in soup.select("a.anchor-link"):
        anchor["class"] = ["headerlink"]
        anchor["title"] = "Link to this section"


def fix_toc(page, soup) -> None:
    """mkdocs-jupyter slugs headings its own way; point each contents entry at the id on the
    page."""
    by_title = {}
    for heading in soup.select("h1[id], h2[id], h3[id], h4[id]"):
        by_title.setdefault(_plain(heading.get_text()), heading["id"])
    ids = set(by_title.values()) | {tag["id"] for tag in soup.select("[id]")}

    def walk(items):
        for item in items:
            if item.id not in ids and _plain(item.title) in by_title:
                item.id = by_title[_plain(item.title)]
            elif (
                item.id not in ids
            ):  # its slug dropped the heading's inline code: the id starts the same
                item.id = next((i for i in by_title.values() if i.startswith(item.id)), item.id)
            walk(item.children)

    walk(page.toc.items if page.toc else [])


def _plain(text: str) -> str:
    return re.sub(r"[^\w]+", " ", text.replace("¶", "")).strip().lower()


# ------------------------------------------------------------------ the hook


def on_config(config):
    """Without a repository URL there is nothing to edit: no edit links (and no warnings about
    them)."""
    if not config.repo_url:
        config.edit_uri = None
    return config


def on_page_content(html, page, config, files):
    if not is_chapter(page):
        return html
    soup = BeautifulSoup(html, "html.parser")
    tidy_for_search(soup)
    code_blocks_like_the_book(soup)
    rewrite_links(soup)
    glossary = Path(config.docs_dir) / "glossary.md"
    if glossary.exists():
        link_glossary_terms(soup, read_glossary(glossary), "../../glossary/")
    draw_admonitions(soup)
    move_figures(soup, Path(config.site_dir) / page.url)
    fix_toc(page, soup)
    return str(soup)


def edit_url(page, config) -> str | None:
    """Where a page's text lives in the repository: the notebook, the problem.md, or docs/."""
    if not config.repo_url:
        return None
    root = (
        config.repo_url.rstrip("/")
        + "/"
        + (config.edit_uri or "edit/main/docs/").removesuffix("docs/")
    )
    src = page.file.src_uri
    if is_chapter(page):
        return root + src  # notebooks/NN_name.ipynb
    match = re.match(r"^exercises/([\w-]+)\.md$", src)
    if match and page.file.generated_by:
        return root + f"practice/problems/{match.group(1)}/problem.md"
    return root + "docs/" + src


def on_page_context(context, page, config, nav):
    """Chapter pages carry their contents in the left column, so the code gets the width."""
    page.edit_url = edit_url(page, config)
    features = config.theme["features"]
    if is_chapter(page) and "toc.integrate" not in features:
        features.append("toc.integrate")
    elif not is_chapter(page) and "toc.integrate" in features:
        features.remove("toc.integrate")
    return context
