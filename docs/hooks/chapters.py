"""Put the chapter notebooks and the exercises into the site, and write the pages that list
them.

notebooks/NN_name.ipynb stays the only copy in git: on_files adds each one to the site at the
same path, read from outside docs_dir, and mkdocs-jupyter renders it as it is (executed, never
re-run). Each practice/problems/<slug>/problem.md becomes the page exercises/<slug>/ (its hints
folded, the judge's commands added). on_config fills the nav's "Chapters" and "Exercises"
sections in order, and on_page_markdown expands two markers: the chapter map on the home page
and the exercise list built from the problems' front matter (title, chapter, difficulty,
requires).
"""

from __future__ import annotations

import json
import logging
import re
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

import yaml
from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.hooks.chapters")

# The judge's own parser of problem.md front matter (practice/harness/problem_md.py), so both
# read it alike.
_spec = spec_from_file_location(
    "problem_md", Path(__file__).resolve().parents[2] / "practice" / "harness" / "problem_md.py"
)
problem_md_parser = module_from_spec(_spec)
_spec.loader.exec_module(problem_md_parser)

CHAPTER_NAME = re.compile(r"^(\d\d)_[A-Za-z0-9_]+\.ipynb$")
CHAPTERS_SECTION = "Chapters"
CHAPTER_MAP_MARKER = "<!-- chapter-map -->"
EXERCISES_MARKER = "<!-- exercises -->"
REQUIRED_FIELDS = ("title", "chapter", "difficulty")
EXERCISES_SECTION = "Exercises"
EXERCISES_INDEX = "exercises/index.md"
HINTS = re.compile(r"^## Hints[ \t]*\n(?P<body>.*?)(?=^## |\Z)", re.DOTALL | re.MULTILINE)


def chapter_notebooks(root: Path) -> list[Path]:
    """notebooks/NN_*.ipynb in chapter order; anything else in that folder is not a chapter."""
    folder = root / "notebooks"
    return sorted(p for p in folder.glob("*.ipynb") if CHAPTER_NAME.match(p.name))


def notebook_title(path: Path) -> str:
    """The first '# ' heading of the notebook's markdown cells, else its file name."""
    cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    for cell in cells:
        if cell.get("cell_type") != "markdown":
            continue
        source = "".join(cell.get("source", []))
        for line in source.splitlines():
            if line.startswith("# "):
                return line[2:].strip()
    return path.stem


def site_path(notebook: Path) -> str:
    return f"notebooks/{notebook.name}"


def read_problem(problem_md: Path) -> dict:
    """The front matter of one exercise, with its slug (folder name); errors name the file and
    field."""
    try:
        meta, _ = problem_md_parser.split_front_matter(problem_md.read_text(encoding="utf-8"))
    except ValueError as error:
        raise ValueError(f"{problem_md}: {error}") from None
    if meta is None:
        raise ValueError(
            f"{problem_md}: expected YAML front matter between '---' lines at the top"
        )
    missing = [field for field in REQUIRED_FIELDS if not meta.get(field)]
    if missing:
        raise ValueError(f"{problem_md}: front matter lacks {', '.join(missing)}")
    meta["slug"] = problem_md.parent.name
    meta["chapter"] = str(meta["chapter"])
    requires = meta.get("requires") or []
    meta["requires"] = [requires] if isinstance(requires, str) else list(requires)
    return meta


def read_problems(root: Path) -> list[dict]:
    problems = []
    for problem_md in sorted((root / "practice" / "problems").glob("*/problem.md")):
        try:
            problems.append(read_problem(problem_md))
        except ValueError as error:  # a warning fails `mkdocs build --strict`
            log.warning("exercise skipped: %s", error)
    return problems


def _chapter_link(stem: str, titles: dict[str, str]) -> str:
    if stem in titles:
        return f"[{titles[stem]}]({site_path(Path(stem + '.ipynb'))})"
    return f"`{stem}` *(not written yet)*"


def exercise_src_uri(slug: str) -> str:
    return f"exercises/{slug}.md"


def exercise_page_markdown(root: Path, problem: dict, number: int) -> str:
    """One exercise's page: its statement from problem.md, the hints folded, the judge's
    commands."""
    text = (root / "practice" / "problems" / problem["slug"] / "problem.md").read_text(
        encoding="utf-8"
    )
    body = problem_md_parser.split_front_matter(text)[1].strip()
    hints = HINTS.search(body)
    body = HINTS.sub("", body).strip()
    title_line, _, rest = body.partition("\n")
    if not title_line.startswith("# "):
        title_line, rest = f"# {problem['title']}", body
    titles = {nb.stem: notebook_title(nb) for nb in chapter_notebooks(root)}
    chapter = problem["chapter"]
    chapter_link = (
        f"[{titles[chapter]}](../{site_path(Path(chapter + '.ipynb'))})"
        if chapter in titles
        else f"`{chapter}`"
    )
    needs = ", ".join(f"`{item}`" for item in problem["requires"]) or "nothing extra"
    slug = problem["slug"]
    parts = [
        f"{title_line.split(' ', 1)[0]} {number}. {title_line[2:].strip()}",
        "",
        f"**From** {chapter_link} · **difficulty** {problem['difficulty']} · **needs** {needs}",
        "",
        rest.strip(),
        "",
    ]
    if hints:
        folded = "\n".join(
            ("    " + line) if line.strip() else ""
            for line in hints.group("body").strip().splitlines()
        )
        parts += ['??? tip "Hints (open when you are stuck)"', "", folded, ""]
    parts += [
        "## Solve it on your machine",
        "",
        "```bash",
        f"python practice/judge.py start {slug}   # copies the starter to practice/workspace/",
        f"python practice/judge.py test {slug}    # runs the tests on your file",
        f"python practice/judge.py hint {slug}    # the hints above, in the terminal",
        "```",
        "",
        "[All exercises](index.md)",
        "",
    ]
    return "\n".join(parts)


def chapter_map_markdown(root: Path, blurbs: dict[str, str]) -> str:
    """One table row per chapter: notebooks that exist, plus planned ones listed in
    docs/chapters.yml."""
    titles = {nb.stem: notebook_title(nb) for nb in chapter_notebooks(root)}
    stems = sorted(set(titles) | set(blurbs))
    rows = ["| # | Chapter | What you build, and what it proves |", "|---|---|---|"]
    for stem in stems:
        rows.append(
            f"| {int(stem[:2])} | {_chapter_link(stem, titles)} | {blurbs.get(stem, '')} |"
        )
    return "\n".join(rows)


def _book_order(problem: dict) -> tuple:
    """The judge's order (chapter, then `order`, then slug), so the numbers here match `judge.py
    start N`."""
    return (str(problem["chapter"]), problem.get("order", 1000), problem["slug"])


def exercises_markdown(root: Path) -> str:
    """The exercises grouped by chapter, each with its difficulty, prerequisites and judge
    command."""
    problems = sorted(read_problems(root), key=_book_order)
    if not problems:
        return (
            "*No exercises yet: they appear here as `practice/problems/<slug>/problem.md` "
            "files are added.*"
        )
    titles = {nb.stem: notebook_title(nb) for nb in chapter_notebooks(root)}
    parts = []
    chapter = None
    for number, problem in enumerate(problems, start=1):
        if problem["chapter"] != chapter:
            chapter = problem["chapter"]
            heading = titles.get(chapter, chapter)
            parts.append(f"\n## {heading}\n")
            if chapter in titles:
                parts.append(
                    f"[Read the chapter](../{site_path(Path(chapter + '.ipynb'))}) first.\n"
                )
            parts.append("| # | Exercise | Difficulty | Needs | Start it with |")
            parts.append("|---|---|---|---|---|")
        needs = ", ".join(f"`{item}`" for item in problem["requires"]) or "nothing extra"
        command = f"`python practice/judge.py start {problem['slug']}`"
        title = str(problem["title"]).replace("|", "\\|")  # a "|" would end the table cell
        link = f"[{title}]({problem['slug']}.md)"
        parts.append(
            f"| {number} | **{link}** (`{problem['slug']}`) | {problem['difficulty']} | "
            f"{needs} | {command} |"
        )
    return "\n".join(parts).strip() + "\n"


def numbered_problems(root: Path) -> list[tuple[int, dict]]:
    """The exercises in the judge's order, numbered as `judge.py start N` numbers them."""
    return list(enumerate(sorted(read_problems(root), key=_book_order), start=1))


def on_config(config):
    """Fill the nav's "Chapters" (one entry per notebook) and "Exercises" (the list, then each
    one)."""
    root = Path(config.config_file_path).parent
    chapters = [{notebook_title(nb): site_path(nb)} for nb in chapter_notebooks(root)]
    exercises = [EXERCISES_INDEX] + [
        {f"{n}. {p['title']}": exercise_src_uri(p["slug"])} for n, p in numbered_problems(root)
    ]
    sections = {CHAPTERS_SECTION: chapters, EXERCISES_SECTION: exercises}
    found = set()
    for item in config.nav or []:
        for name in sections:
            if isinstance(item, dict) and name in item:
                item[name] = sections[name]
                found.add(name)
    missing = [name for name in sections if name not in found]
    if missing:
        raise PluginError(
            f"mkdocs.yml nav needs {', '.join(repr(m + ': []') for m in missing)} section(s)"
        )
    return config


@event_priority(50)  # before mkdocs-jupyter's on_files, which wraps every .ipynb file it sees
def on_files(files, config):
    root = Path(config.config_file_path).parent
    for notebook in chapter_notebooks(root):
        if files.get_file_from_path(site_path(notebook)) is not None:
            raise PluginError(
                f"docs/{site_path(notebook)} shadows the chapter {site_path(notebook)}; "
                "remove it"
            )
        # src_dir is the repository root, so src_uri (and the page URL) mirror the notebook's
        # path in git; a File.generated one would lose its source path inside mkdocs-jupyter's
        # wrapper.
        files.append(
            File(
                site_path(notebook),
                src_dir=str(root),
                dest_dir=config.site_dir,
                use_directory_urls=config.use_directory_urls,
            )
        )
    for number, problem in numbered_problems(root):
        src_uri = exercise_src_uri(problem["slug"])
        if files.get_file_from_path(src_uri) is not None:
            raise PluginError(
                f"docs/{src_uri} shadows the exercise page made from its problem.md; remove it"
            )
        files.append(
            File.generated(
                config, src_uri, content=exercise_page_markdown(root, problem, number)
            )
        )
    return files


def on_serve(server, config, builder):
    """`mkdocs serve` rebuilds when a notebook or an exercise changes, not only when docs/
    does."""
    root = Path(config.config_file_path).parent
    for folder in (root / "notebooks", root / "practice" / "problems"):
        if folder.is_dir():
            server.watch(str(folder))
    return server


def on_page_markdown(markdown, page, config, files):
    root = Path(config.config_file_path).parent
    if CHAPTER_MAP_MARKER in markdown:
        blurbs_file = Path(config.docs_dir) / "chapters.yml"
        blurbs = (
            yaml.safe_load(blurbs_file.read_text(encoding="utf-8"))
            if blurbs_file.exists()
            else {}
        )
        markdown = markdown.replace(
            CHAPTER_MAP_MARKER, chapter_map_markdown(root, blurbs or {})
        )
    if EXERCISES_MARKER in markdown:
        markdown = markdown.replace(EXERCISES_MARKER, exercises_markdown(root))
    return markdown
