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
