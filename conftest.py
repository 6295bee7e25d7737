"""Notebooks under nbval (`pytest --nbval notebooks`) start from a generated tiny checkpoint.

The first use of the book's model writes it into the cache and says so on stderr; under nbval
that line would be an output the committed chapter does not have. Generating it before the first
notebook runs keeps every chapter's compared outputs the same on a fresh machine as on a warm
one. The same holds for the real model (SmolLM2, converted from its GGUF on first use).
"""


def pytest_sessionstart(session):
    if getattr(session.config.option, "nbval", False) or getattr(
        session.config.option, "nbval_lax", False
    ):
        from minillm.checkpoints import default_model_path
        from minillm.checkpoints.smollm2 import ensure_smollm2, package_dir

        default_model_path()
        if package_dir() is not None:  # the real model: converted before any chapter runs
            ensure_smollm2()


# `make test` spreads its files over the cores with pytest-xdist, each file whole on one worker
# (--dist loadscope), in this order: the longest start first, so that no long file is left to
# run alone on one core at the end. The rest keep pytest's order.
LONGEST_FIRST = (
    "tests/test_site.py",
    "tests/test_smollm2.py",
    "tests/test_judge_attacks.py",
    "tests/test_lm_eval.py",
    "tests/test_judge.py",
    "tests/test_lab.py",
    "notebooks/06_scheduler.ipynb",
    "notebooks/09_speculative_decoding.ipynb",
    "notebooks/07_prefix_caching.ipynb",
    "notebooks/08_serving.ipynb",
    "notebooks/12_structured_output.ipynb",
    "notebooks/01_mini_llm.ipynb",
)


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    # a node id starts with its file's path from the rootdir; the sort is stable: each file
    # keeps its own order
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
